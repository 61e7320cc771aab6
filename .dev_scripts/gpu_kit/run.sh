#!/usr/bin/env bash
# The GPU node's command, run from the checkout with the kit (.gpu_kit/, `make gpu-kit`) beside it:
#
#   OUT=/path bash .gpu_kit/run.sh                     # the node: CUDA, within $VATTN_NODE_BUDGET_S (540 s)
#   OUT=/path bash .gpu_kit/run.sh --device cpu --quick # the rehearsal on a CPU (make gpu-rehearsal)
#
# 1. installs the kit offline (--no-index --no-deps) and vattn-mm from the checkout into a folder put
#    on the import path before the node's own packages (its python3 is itself a venv: a venv made from
#    it would not see its torch);
# 2. compiles mmcv's ops from the kit's source archive in the background (the node's GPU architecture only,
#    all its cores) for tier 2;
# 3. tier 1, no compiled mmcv ops: .dev_scripts/run_gpu_check.py (golden cases, autocast, training steps, fast
#    paths) and the mmpretrain demo classifier trained a few iterations;
# 4. tier 2, when the build finished in the time left: mmcv with ops replaces mmcv-lite, then the Mask R-CNN
#    and UperNet demos train 50 iterations each; otherwise tier 2 is reported skipped with the build's
#    progress, never as passed.
# One failing step never stops the others. $OUT gets node.md (device, driver, versions, each step's
# outcome and time), tier1/gpu_check.{json,md}, the logs; the exit status is 1 when a step failed.
set -uo pipefail
START=$(date +%s)
KIT=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$KIT/.." && pwd)
OUT=${OUT:-$ROOT/work_dirs/gpu_check}
BUDGET_S=${VATTN_NODE_BUDGET_S:-540}
ENV=${VATTN_NODE_ENV:-/tmp/vattn-node-env}
BUILD=${VATTN_NODE_BUILD:-/tmp/vattn-mmcv-build}
PY=${PYTHON:-python3}
DEVICE=cuda
QUICK=()
while [ $# -gt 0 ]; do
  case $1 in
    --device) DEVICE=$2; shift 2 ;;
    --quick) QUICK=(--quick); shift ;;
    *) echo "usage: run.sh [--device cuda|cpu] [--quick]"; exit 2 ;;
  esac
done
[ -n "${QUICK[*]}" ] && ITERS=4 || ITERS=50
mkdir -p "$OUT"
: > "$OUT/steps.tsv"
status=0

elapsed() { echo $(($(date +%s) - START)); }
# the build's processes (pip, ninja, the compilers) end with it
kill_tree() {
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
}
left() { echo $((BUDGET_S - $(elapsed))); }
log() { echo "[node $(elapsed)s] $*" | tee -a "$OUT/node.log"; }
# record STEP OUTCOME DETAIL: one row of the report
record() {
  printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$(elapsed)" "$3" >> "$OUT/steps.tsv"
  log "$1: $2 ${3:+($3)}"
  [ "$2" != failed ] || status=1
}

# ------------------------------------------------------------------ 1. the kit, offline
log "installing the kit into $ENV for $($PY --version 2>&1)"
rm -rf "$ENV"
# the kit's setuptools builds vattn-mm's own wheel (no build isolation: the node has no index)
# from a copy of what setup.py reads: a build in the checkout would replace its editable
# install's vattn_mm/.mim links with copies
export PYTHONPATH=$ENV/kit
mkdir -p "$ENV/src"
if "$PY" -m pip install -q --no-index --no-deps --target "$ENV/kit" "$KIT"/wheels/*.whl \
     >> "$OUT/install.log" 2>&1 \
   && cp -r "$ROOT"/setup.py "$ROOT"/requirements.txt "$ROOT"/README.md "$ROOT"/LICENSE \
     "$ROOT"/model-index.yml "$ROOT"/configs "$ROOT"/tools "$ROOT"/vattn_mm "$ENV/src" \
     && rm -rf "$ENV/src/vattn_mm/.mim" \
   && "$PY" -m pip install -q --no-index --no-deps --no-build-isolation --target "$ENV/kit" \
     "$ENV/src" >> "$OUT/install.log" 2>&1; then
  record install passed "$(ls "$KIT"/wheels | wc -l) wheels and vattn-mm"
else
  record install failed "see install.log"
  exit 1
fi
VPY=$PY
cd "$ROOT" || exit 1

# ------------------------------------------------------------------ 2. tier 2's build, in the background
rm -rf "$BUILD"
mkdir -p "$BUILD"
arch=$("$VPY" -c 'import torch; c = torch.cuda.get_device_capability() if torch.cuda.is_available() else None; print(f"{c[0]}.{c[1]}" if c else "")' 2>/dev/null)
if [ "$DEVICE" = cuda ] && [ -z "$arch" ]; then
  record tier2-build skipped 'no CUDA device visible'
else
  log "building mmcv with ops in the background (${arch:+CUDA arch $arch, }$(nproc) jobs)"
  (
    cd "$BUILD" && tar xzf "$KIT"/mmcv-*.tar.gz && cd mmcv-* \
      && sed -i 's/-std=c++17/-std=c++20/g' setup.py \
      && if [ -n "$arch" ]; then export FORCE_CUDA=1 TORCH_CUDA_ARCH_LIST=$arch; else export FORCE_CUDA=0; fi \
      && MMCV_WITH_OPS=1 MAX_JOBS=$(nproc) "$VPY" -m pip wheel --no-index --no-deps \
           --no-build-isolation -v . -w "$BUILD/wheel"
    echo $? > "$BUILD/rc"
  ) > "$OUT/mmcv_build.log" 2>&1 &
  BUILD_PID=$!
fi

# ------------------------------------------------------------------ 3. tier 1
# tier 2 needs about 2.5 minutes once the build is done: tier 1 gets the rest
tier1_budget=$(( $(left) - 150 ))
[ "$tier1_budget" -gt 60 ] || tier1_budget=60
log "tier 1: gpu_check on $DEVICE within ${tier1_budget}s"
"$VPY" .dev_scripts/run_gpu_check.py --out "$OUT/tier1" --device "$DEVICE" --maskrcnn-iters 0 \
  --budget-s "$tier1_budget" "${QUICK[@]}" > "$OUT/tier1.log" 2>&1
rc=$?
if [ $rc -eq 0 ]; then record tier1-gpu-check passed 'tier1/gpu_check.md'
else record tier1-gpu-check failed "exit $rc, tier1/gpu_check.md and tier1.log"; fi

demo_data=$OUT/.demo_data
"$VPY" tools/make_demo_data.py --root "$demo_data" --num-train 8 --num-val 4 --size 64 \
  > "$OUT/demo_data.log" 2>&1 || record demo-data failed 'demo_data.log'
# train CONFIG NAME DATA_OPTIONS...: ITERS iterations on the device, its log kept
train() {
  local config=$1 name=$2
  shift 2
  local env=()
  [ "$DEVICE" = cuda ] || env=(CUDA_VISIBLE_DEVICES=)
  env "${env[@]}" "$VPY" tools/train.py "$config" --work-dir "$OUT/.work/$name" --cfg-options "$@" \
    > "$OUT/$name.log" 2>&1
}
cls=$demo_data/cls
if train configs/demo/pvtv2_b0_cls_demo.py tier1-classifier \
    "train_dataloader.dataset.data_root=$cls" "val_dataloader.dataset.data_root=$cls" \
    "test_dataloader.dataset.data_root=$cls" train_cfg.max_epochs=2 train_cfg.val_interval=2 \
    train_dataloader.batch_size=4 train_dataloader.num_workers=0 \
    train_dataloader.persistent_workers=False val_dataloader.num_workers=0 \
    val_dataloader.persistent_workers=False 'param_scheduler=[]'; then
  record tier1-classifier passed "$(grep -o 'loss: [0-9.e+-]*' "$OUT/tier1-classifier.log" | tail -n 1)"
else
  record tier1-classifier failed 'tier1-classifier.log'
fi

# ------------------------------------------------------------------ 4. tier 2
if [ -n "${BUILD_PID:-}" ]; then
  while [ ! -f "$BUILD/rc" ] && [ "$(left)" -gt 150 ]; do sleep 5; done
  progress=$(grep -o '\[[0-9]*/[0-9]*\]' "$OUT/mmcv_build.log" | tail -n 1)
  if [ ! -f "$BUILD/rc" ]; then
    kill_tree "$BUILD_PID"
    record tier2 skipped "mmcv's build unfinished after $(elapsed)s, at ${progress:-no compile step yet}"
  elif [ "$(cat "$BUILD/rc")" != 0 ]; then
    record tier2 failed "mmcv's build failed (mmcv_build.log)"
  elif ! { "$VPY" -m pip install -q --no-index --no-deps --target "$ENV/ops" "$BUILD"/wheel/mmcv-*.whl \
           && export PYTHONPATH=$ENV/ops:$ENV/kit \
           && "$VPY" -c 'import mmcv.ops, mmdet.models, mmseg.models'; } >> "$OUT/install.log" 2>&1; then
    record tier2 failed 'mmcv with ops does not install or import (install.log)'
  else
    record tier2-build passed "mmcv with ops built in $(elapsed)s"
    coco=$demo_data/coco/ ade=$demo_data/ade/
    common=("train_cfg.max_iters=$ITERS" "train_cfg.val_interval=$ITERS"
            "default_hooks.checkpoint.interval=$ITERS" default_hooks.logger.interval=1
            train_dataloader.batch_size=2 train_dataloader.num_workers=0
            train_dataloader.persistent_workers=False val_dataloader.num_workers=0
            val_dataloader.persistent_workers=False)
    for demo in maskrcnn upernet; do
      if [ "$demo" = maskrcnn ]; then
        data=("train_dataloader.dataset.data_root=$coco" "val_dataloader.dataset.data_root=$coco"
              "test_dataloader.dataset.data_root=$coco"
              "val_evaluator.ann_file=${coco}annotations/instances_val.json"
              "test_evaluator.ann_file=${coco}annotations/instances_val.json")
      else
        data=("train_dataloader.dataset.data_root=$ade" "val_dataloader.dataset.data_root=$ade"
              "test_dataloader.dataset.data_root=$ade")
      fi
      if train "configs/demo/pvtv2_b0_${demo}_demo.py" "tier2-$demo" "${data[@]}" "${common[@]}"; then
        record "tier2-$demo" passed "$(grep -o ' loss: [0-9.e+-]*' "$OUT/tier2-$demo.log" | sed -n '1p;$p' | tr '\n' ' ')"
      else
        record "tier2-$demo" failed "tier2-$demo.log"
      fi
    done
  fi
fi
rm -rf "$OUT/.work" "$demo_data"

# ------------------------------------------------------------------ the report
{
  echo "# GPU node run"
  echo
  "$VPY" - "$DEVICE" <<'EOF'
import platform
import sys

import torch

device = sys.argv[1]
print(f'- Python {platform.python_version()}, torch {torch.__version__} (CUDA {torch.version.cuda})')
if device == 'cuda' and torch.cuda.is_available():
    props = torch.cuda.get_device_properties(0)
    print(f'- device: {props.name}, {props.total_memory / 2**30:.0f} GiB, '
          f'capability {props.major}.{props.minor}')
    try:
        import subprocess
        driver = subprocess.run(['nvidia-smi', '--query-gpu=driver_version', '--format=csv,noheader'],
                                capture_output=True, text=True).stdout.strip()
        print(f'- driver: {driver}')
    except OSError:
        pass
else:
    print(f'- device: {device}')
for name in ('mmengine', 'mmcv', 'mmdet', 'mmseg', 'mmpretrain'):
    try:
        module = __import__(name)
        print(f'- {name} {module.__version__}')
    except Exception as err:   # the report lists what did not import
        print(f'- {name}: {type(err).__name__}: {err}')
EOF
  echo
  echo "| step | outcome | at s | detail |"
  echo "|---|---|---|---|"
  sed 's/\t/ | /g; s/^/| /; s/$/ |/' "$OUT/steps.tsv"
} > "$OUT/node.md"
log "done: $OUT/node.md"
exit $status
