#!/usr/bin/env bash
# Create the virtual environment and install vattn-mm with the tested stack: every pip install runs with
# -c tools/constraints.txt (the exact versions). Idempotent: a second run only checks. mmcv is built from
# source once (with ops, C++20 for torch >= 2.10) and its wheel is kept in $VATTN_CACHE, keyed by the torch
# build and by whether mmcv's CUDA kernels were compiled.
#
#   VATTN_VENV   environment to create/use   (default: <repo>/.venv)
#   VATTN_CACHE  cache for the mmcv wheel    (default: ~/.cache/vattn-mm)
#   PYTHON       interpreter for the venv    (default: python3)
#   VATTN_MIN_FREE_GIB  disk the install needs free (default: 7)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VATTN_VENV:-$ROOT/.venv}
CACHE=${VATTN_CACHE:-$HOME/.cache/vattn-mm}
CONSTRAINTS=$ROOT/tools/constraints.txt
PIP=(pip install -q --disable-pip-version-check -c "$CONSTRAINTS")

log() { echo "[install] $*"; }
pin() { sed -n "s/^$1==\([^ #]*\).*/\1/p" "$CONSTRAINTS"; }
TORCH=$(pin torch)
MMCV=$(pin mmcv)
if [ -z "$TORCH" ] || [ -z "$MMCV" ]; then
  log "$CONSTRAINTS must pin torch and mmcv (name==version)"
  exit 1
fi

# The environment is complete when the stack imports and every pinned package is installed at its pin.
stack_complete() {
  [ -x "$VENV/bin/python" ] \
    && "$VENV/bin/python" -c "import vattn_mm, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models" 2>/dev/null \
    && [ -f "$VENV/timm-tests/$(pin timm)/test_models.py" ] \
    && "$VENV/bin/python" - "$CONSTRAINTS" 2>/dev/null <<'EOF'
import sys
from importlib.metadata import version
from packaging.requirements import Requirement

for line in open(sys.argv[1]):
    line = line.split('#', 1)[0].strip()
    if line:
        pinned = Requirement(line)
        assert pinned.specifier.contains(version(pinned.name), prereleases=True), pinned
EOF
}
if stack_complete; then
  log "environment $VENV is complete"
  exit 0
fi

# The finished environment takes ~6.1 GiB (torch's CUDA build alone 5.5 GiB). Running out of disk half-way
# leaves pip's bare "No space left on device", so check first; what an unfinished environment already holds
# (an earlier run stopped half-way) counts towards it.
need_kib=$(( ${VATTN_MIN_FREE_GIB:-7} * 1024 * 1024 ))
[ -d "$VENV" ] && need_kib=$(( need_kib - $(du -sk "$VENV" | cut -f1) ))
parent=$VENV
while [ ! -d "$parent" ]; do parent=$(dirname "$parent"); done
read -r free_kib mount < <(df -Pk "$parent" | awk 'NR == 2 {print $4, $6}')
if [ "$free_kib" -lt "$need_kib" ]; then
  log "not enough disk for $VENV: $((free_kib / 1024)) MiB free on $mount, the install needs about $((need_kib / 1024)) MiB more (torch's CUDA build alone is 5.5 GiB). Free some space or set VATTN_VENV to a larger disk."
  exit 1
fi

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment $VENV"
  "${PYTHON:-python3}" -m venv "$VENV"
fi
# shellcheck disable=SC1091
. "$VENV/bin/activate"

log "installing build tools and torch $TORCH / torchvision $(pin torchvision)"
"${PIP[@]}" 'setuptools<81' wheel ninja
"${PIP[@]}" torch torchvision
# torch pulls a newer setuptools; mmcv's setup.py needs pkg_resources (< 81).
"${PIP[@]}" 'setuptools<81'

# An mmcv wheel fits one torch build (its CUDA version, or cpu) and has CUDA kernels or CPU ops only; the
# cache key names both. mmcv compiles its CUDA kernels (which needs nvcc) when torch sees a GPU or
# FORCE_CUDA=1 is set (a node without a GPU); otherwise, and without nvcc, it gets CPU ops only.
build=$(python - <<'EOF'
import logging
import os

import torch

logging.getLogger('torch.utils.cpp_extension').setLevel(logging.ERROR)
from torch.utils.cpp_extension import CUDA_HOME  # noqa: E402

if torch.version.hip:
    print(f"rocm{torch.version.hip.split('-')[0]} hip a ROCm build of torch")
elif not torch.version.cuda:
    print('cpu cpu a CPU build of torch')
else:
    key = f"cu{torch.version.cuda.replace('.', '')}"
    gpu = torch.cuda.is_available()
    if not (gpu or os.environ.get('FORCE_CUDA') == '1'):
        print(key, 'cpu no GPU visible; FORCE_CUDA=1 with nvcc builds the CUDA kernels too')
    elif CUDA_HOME is None:
        print(key, 'cpu no nvcc found, set CUDA_HOME: GPU training needs the CUDA kernels')
    else:
        print(key, f"cuda {'a GPU' if gpu else 'FORCE_CUDA=1'} and nvcc in {CUDA_HOME}")
EOF
) || { log "cannot read torch's build from $VENV"; exit 1; }
read -r TORCH_BUILD MMCV_OPS why <<< "$build"
WHEELS=$CACHE/wheels/torch-$TORCH-$TORCH_BUILD-ops-$MMCV_OPS
case $MMCV_OPS in
  cuda) mmcv_env=(FORCE_CUDA=1) ;;
  cpu)  mmcv_env=(FORCE_CUDA=0 CUDA_VISIBLE_DEVICES=) ;;   # else a visible GPU makes mmcv compile CUDA kernels
  *)    mmcv_env=() ;;
esac

if ! python -c "import mmcv.ops, mmcv; assert mmcv.__version__ == '$MMCV'" 2>/dev/null; then
  mkdir -p "$WHEELS"
  wheel=$(ls "$WHEELS"/mmcv-$MMCV-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    log "building mmcv $MMCV with $MMCV_OPS ops ($why) from source, once (CPU ops: ~20 min on 2 cores; wheel cached in $WHEELS)"
    src=$(mktemp -d)
    pip download -q --disable-pip-version-check -c "$CONSTRAINTS" --no-deps --no-build-isolation \
      --no-binary :all: mmcv -d "$src"
    tar xzf "$src/mmcv-$MMCV.tar.gz" -C "$src"
    # torch >= 2.10 headers need C++20; mmcv 2.1.0 hard-codes -std=c++17.
    sed -i 's/-std=c++17/-std=c++20/g' "$src/mmcv-$MMCV/setup.py"
    (cd "$src/mmcv-$MMCV" && env ${mmcv_env[@]+"${mmcv_env[@]}"} MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      pip wheel -q --disable-pip-version-check --no-build-isolation --no-deps . -w "$WHEELS" > "$src/build.log" 2>&1) \
      || { tail -n 40 "$src/build.log"; log "mmcv build failed (log: $src/build.log)"; exit 1; }
    wheel=$(ls "$WHEELS"/mmcv-$MMCV-*.whl | head -n 1)
    rm -rf "$src/mmcv-$MMCV"
  fi
  log "installing mmcv from $wheel ($MMCV_OPS ops: $why)"
  "${PIP[@]}" "$wheel"
fi

log "installing vattn-mm and mmengine / mmdet / mmsegmentation / mmpretrain"
"${PIP[@]}" --no-build-isolation --find-links "$WHEELS" -e "$ROOT[all,tests]"
# benchmark-only peer (benchmark.py --against timm), without its dependencies so that the pinned
# torch / torchvision stay
"${PIP[@]}" --no-deps timm
# timm's own model tests (tests/test_timm_model_tests.py runs them on the vattn_* models): its sdist
# holds them, its wheel does not
bash "$ROOT/tools/fetch_timm_tests.sh" "$VENV/timm-tests" "$(pin timm)"
# mmdet's and mmseg's analyze_logs.py import seaborn, which neither declares
"${PIP[@]}" seaborn
# mim (tests/checkpoint/test_model_index.py) without its opendatalab -> openxlab chain, which pins old setuptools,
# requests, tqdm and rich: only what `mim search` / `mim train` import, then openmim itself last (a
# later pip install would report the chain as missing)
"${PIP[@]}" colorama pandas requests tabulate
"${PIP[@]}" --no-deps openmim
python -c "import vattn_mm, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models, mmpretrain.datasets" \
  && log "done: $(python -c 'import torch, mmcv, mmdet, mmseg, mmpretrain, mmengine; print(f"torch {torch.__version__}, mmengine {mmengine.__version__}, mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}")')"
