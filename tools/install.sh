#!/usr/bin/env bash
# Create the virtual environment and install vattn-mm with its pinned stack.
# Idempotent: a second run only checks. mmcv 2.1.0 is built from source once
# (with ops, C++20 for torch 2.14) and its wheel is kept in $VATTN_CACHE.
#
#   VATTN_VENV   environment to create/use   (default: <repo>/.venv)
#   VATTN_CACHE  cache for the mmcv wheel    (default: ~/.cache/vattn-mm)
#   PYTHON       interpreter for the venv    (default: python3)
#   VATTN_MIN_FREE_GIB  disk the install needs free (default: 7)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
VENV=${VATTN_VENV:-$ROOT/.venv}
CACHE=${VATTN_CACHE:-$HOME/.cache/vattn-mm}
TORCH=2.14.1
TORCHVISION=0.29.1
MMCV=2.1.0
WHEELS=$CACHE/wheels/torch-$TORCH
QUIET=(-q --disable-pip-version-check)

log() { echo "[install] $*"; }

if [ -x "$VENV/bin/python" ] \
   && "$VENV/bin/python" -c "import vattn_mm, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models" 2>/dev/null \
   && "$VENV/bin/python" -c "import torch, mmcv; assert torch.__version__.startswith('$TORCH') and mmcv.__version__ == '$MMCV'" 2>/dev/null; then
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

log "installing build tools and torch $TORCH / torchvision $TORCHVISION"
pip install "${QUIET[@]}" 'setuptools<81' wheel ninja
pip install "${QUIET[@]}" "torch==$TORCH" "torchvision==$TORCHVISION"
# torch pulls a newer setuptools; mmcv's setup.py needs pkg_resources (< 81).
pip install "${QUIET[@]}" 'setuptools<81'

if ! python -c "import mmcv.ops, mmcv; assert mmcv.__version__ == '$MMCV'" 2>/dev/null; then
  mkdir -p "$WHEELS"
  wheel=$(ls "$WHEELS"/mmcv-$MMCV-*.whl 2>/dev/null | head -n 1 || true)
  if [ -z "$wheel" ]; then
    log "building mmcv $MMCV with ops from source, once (~20 min on 2 cores; wheel cached in $WHEELS)"
    src=$(mktemp -d)
    pip download "${QUIET[@]}" --no-deps --no-build-isolation --no-binary :all: "mmcv==$MMCV" -d "$src"
    tar xzf "$src/mmcv-$MMCV.tar.gz" -C "$src"
    # torch >= 2.10 headers need C++20; mmcv 2.1.0 hard-codes -std=c++17.
    sed -i 's/-std=c++17/-std=c++20/g' "$src/mmcv-$MMCV/setup.py"
    (cd "$src/mmcv-$MMCV" && MMCV_WITH_OPS=1 MAX_JOBS=${MAX_JOBS:-$(nproc)} \
      pip wheel "${QUIET[@]}" --no-build-isolation --no-deps . -w "$WHEELS" > "$src/build.log" 2>&1) \
      || { tail -n 40 "$src/build.log"; log "mmcv build failed (log: $src/build.log)"; exit 1; }
    wheel=$(ls "$WHEELS"/mmcv-$MMCV-*.whl | head -n 1)
    rm -rf "$src/mmcv-$MMCV"
  fi
  log "installing $(basename "$wheel")"
  pip install "${QUIET[@]}" "$wheel"
fi

log "installing vattn-mm and mmengine / mmdet / mmsegmentation / mmpretrain"
pip install "${QUIET[@]}" --no-build-isolation --find-links "$WHEELS" -e "$ROOT[tests]"
# benchmark-only peer (benchmark.py --against timm), without its dependencies so that the pinned
# torch / torchvision stay
pip install "${QUIET[@]}" --no-deps 'timm==1.0.31'
python -c "import vattn_mm, mmcv.ops, mmdet.models, mmseg.models, mmpretrain.models, mmpretrain.datasets" \
  && log "done: $(python -c 'import torch, mmcv, mmdet, mmseg, mmpretrain, mmengine; print(f"torch {torch.__version__}, mmengine {mmengine.__version__}, mmcv {mmcv.__version__}, mmdet {mmdet.__version__}, mmseg {mmseg.__version__}, mmpretrain {mmpretrain.__version__}")')"
