#!/usr/bin/env bash
# `make gpu-rehearsal`: the node command (.gpu_kit/run.sh) on this CPU, in an environment that imitates the
# node: Python 3.12, torch 2.11.0 and torchvision 0.26.0 from PyPI and those of the node's packages
# (.dev_scripts/gpu_kit/node_packages.txt) that the project or OpenMMLab import, at the node's versions where
# published; nothing of OpenMMLab but what the kit carries. An import the node would miss fails here.
# Tier 2 runs its build-and-wait logic: mmcv's ops compile for the CPU in the background and, on 2 cores,
# do not finish within the budget, so tier 2 must come out `skipped` with the build's progress.
#   VATTN_CACHE       the imitation environment is kept in $VATTN_CACHE/envs/gpu-node-<hash> (default
#                     ~/.cache/vattn-mm)
#   OUT               the report folder (default work_dirs/gpu_rehearsal)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
NODE=$ROOT/.dev_scripts/gpu_kit/node_packages.txt
# the node's packages the project imports beyond what OpenMMLab's dependencies need (those the kit's
# resolution lists in .gpu_kit/from_node.txt)
USED='torch torchvision numpy scipy matplotlib opencv-python-headless pyyaml rich regex tabulate pytest
pytest-xdist execnet filelock onnx onnxruntime timm einops packaging pillow six tqdm requests pandas
seaborn psutil ninja cython pybind11 wheel typing-extensions sympy networkx jinja2 fsspec
huggingface-hub safetensors
markdown-it-py pygments python-dateutil pyparsing cycler kiwisolver fonttools contourpy'
CACHE=${VATTN_CACHE:-$HOME/.cache/vattn-mm}
[ -d "$ROOT/.gpu_kit/wheels" ] || { echo '[gpu-rehearsal] no .gpu_kit/: make gpu-kit first'; exit 1; }
ENV=$CACHE/envs/gpu-node-$(cat "$NODE" "$0" "$ROOT/.gpu_kit/from_node.txt" | sha256sum | cut -c1-12)
OUT=${OUT:-$ROOT/work_dirs/gpu_rehearsal}
log() { echo "[gpu-rehearsal] $*"; }
PY=${PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -n 1)}
[ -x "${PY:-}" ] || { log 'needs a Python 3.12 (pyenv, or set PYTHON312)'; exit 1; }

if [ ! -f "$ENV/.complete" ]; then
  log "creating the node's imitation $ENV"
  rm -rf "$ENV"
  "$PY" -m venv "$ENV"
  pins=()
  for name in $USED $(cat "$ROOT/.gpu_kit/from_node.txt"); do
    pin=$(grep -i "^$name==" "$NODE" || true)
    pins+=("${pin:-$name}")
  done
  PIP_CONFIG_FILE=/dev/null "$ENV/bin/pip" install -q --disable-pip-version-check "${pins[@]}"
  touch "$ENV/.complete"
  find "$CACHE/envs" -maxdepth 1 -name 'gpu-node-*' ! -path "$ENV" -exec rm -rf {} +
fi
# the node command must leave the checkout as it found it (its report goes under work_dirs/)
checkout() { git -C "$ROOT" status --porcelain --ignored -- . ':!work_dirs' | sort; }
before=$(checkout)
log "the node command: $(date -u +%H:%M:%S)"
start=$(date +%s)
rc=0
OUT=$OUT PYTHON=$ENV/bin/python VATTN_NODE_ENV=/tmp/vattn-rehearsal-env \
  VATTN_NODE_BUILD=/tmp/vattn-rehearsal-build bash "$ROOT/.gpu_kit/run.sh" --device cpu --quick || rc=$?
log "took $(($(date +%s) - start)) s, exit $rc; report: $OUT/node.md"
if [ "$(checkout)" != "$before" ]; then
  log "the node command changed the checkout:"
  diff <(echo "$before") <(checkout)
  rc=1
fi
exit $rc
