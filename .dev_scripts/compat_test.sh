#!/usr/bin/env bash
# CI's compatibility jobs: the tests of everything that does not need mmdet / mmseg (which need mmcv's
# compiled ops) on the edges of the supported range, with mmcv-lite:
#
#   bash .dev_scripts/compat_test.sh floor    # Python 3.9,  torch 2.1.2  (tools/constraints-floor.txt)
#   bash .dev_scripts/compat_test.sh newest   # Python 3.12, torch 2.15.0 (tools/constraints-newest.txt)
#
# The environment is made once per constraints file (its hash names the folder) under
# $VATTN_CACHE/envs/ and reused; vattn-mm is installed into it from this checkout (editable, without
# dependencies) at every run, so one environment serves every clone; making one removes the others of
# the same stack. The machine's pip configuration is not read (it may cap torch below the newest release).
#   VATTN_CACHE    default ~/.cache/vattn-mm
#   PYTHON_<NAME>  interpreter for the environment (default: pyenv's newest 3.9.x / 3.12.x)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
NAME=${1:?usage: compat_test.sh floor|newest [pytest args]}
shift
case $NAME in
  floor) PY_SERIES=3.9 ;;
  newest) PY_SERIES=3.12 ;;
  *) echo "[compat] unknown stack '$NAME': floor or newest"; exit 2 ;;
esac
CONSTRAINTS=$ROOT/tools/constraints-$NAME.txt
CACHE=${VATTN_CACHE:-$HOME/.cache/vattn-mm}
VENV=$CACHE/envs/$NAME-$(sha256sum "$CONSTRAINTS" | cut -c1-12)
log() { echo "[compat $NAME] $*"; }

override=PYTHON_$(echo "$NAME" | tr '[:lower:]' '[:upper:]')
PY=${!override:-}
if [ -z "$PY" ]; then
  PY=$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/$PY_SERIES.*/bin/python 2>/dev/null | sort -V | tail -n 1 || true)
  [ -n "$PY" ] || PY=$(command -v "python$PY_SERIES" || true)
fi
if [ -z "$PY" ]; then
  log "no Python $PY_SERIES found (pyenv or python$PY_SERIES on the PATH); set $override"
  exit 1
fi

if [ ! -f "$VENV/.complete" ]; then
  log "creating $VENV with $("$PY" --version) and $(basename "$CONSTRAINTS")"
  rm -rf "$VENV"
  "$PY" -m venv "$VENV"
  packages=$(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' "$CONSTRAINTS")
  # shellcheck disable=SC2086
  PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install -q --disable-pip-version-check \
    -c "$CONSTRAINTS" $packages
  touch "$VENV/.complete"
  # an environment is several GB: those of earlier constraints files go
  find "$CACHE/envs" -maxdepth 1 -name "$NAME-*" ! -path "$VENV" -exec rm -rf {} +
fi
log "$("$VENV/bin/python" -c 'import sys, torch, mmengine, mmcv; print(f"Python {sys.version.split()[0]}, torch {torch.__version__}, mmengine {mmengine.__version__}, mmcv {mmcv.__version__} (no ops)")')"

PIP_CONFIG_FILE=/dev/null "$VENV/bin/pip" install -q --disable-pip-version-check --no-deps \
  --no-build-isolation -e "$ROOT"

cd "$ROOT"
unset VATTN_FULL_STACK   # mmdet / mmseg are not here: their tests skip (needs markers)
OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 \
  "$VENV/bin/python" -m pytest -q -p no:cacheprovider -n 2 --dist loadgroup -m "not extended" \
  tests/ops tests/layers tests/backbones tests/utils tests/test_timm.py \
  tests/project/test_configs.py tests/project/test_lean_import.py tests/project/test_requirements.py \
  tests/engine/test_exact_resume.py tests/engine/test_amp.py "$@"
