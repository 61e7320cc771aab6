#!/usr/bin/env bash
# `make gpu-kit`: write .gpu_kit/, what the lent GPU node (Python 3.12, torch 2.11, no package index, no
# OpenMMLab) lacks to run the GPU check, carried beside the checkout:
#   wheels/          CPython 3.12 manylinux x86_64 wheels of the OpenMMLab packages and of every dependency
#                    the node's own packages (.dev_scripts/gpu_kit/node_packages.txt) do not already provide;
#                    mmcv as mmcv-lite (no compiled ops)
#   mmcv-<v>.tar.gz  mmcv's source archive: the node compiles its CUDA ops while tier 1 runs
#   run.sh           the node command (.dev_scripts/gpu_kit/run.sh)
#   from_node.txt    the dependencies the node's own packages provide (what the rehearsal installs)
# and prints the kit's size, which must stay within 20 MiB (the checkout and the kit travel together,
# 64 MiB in all).
#   VATTN_GPU_KIT   where to write it (default: <repo>/.gpu_kit)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
KIT=${VATTN_GPU_KIT:-$ROOT/.gpu_kit}
NODE=$ROOT/.dev_scripts/gpu_kit/node_packages.txt
WANT=$ROOT/.dev_scripts/gpu_kit/constraints.txt
MAX_MIB=20
# the node's Python; pip resolves and downloads for it from any interpreter
TARGET=(--only-binary=:all: --python-version 3.12 --implementation cp
        --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64
        --platform manylinux2014_x86_64)
log() { echo "[gpu-kit] $*"; }
# the machine's pip configuration may cap torch or add local indexes: not the node's
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
# pip resolves for the node with an interpreter of its Python series (markers of the wheels' metadata
# are evaluated for it); mmcv's source archive is read with the pinned environment (its setup imports torch)
PY=${PYTHON312:-$(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12.*/bin/python 2>/dev/null | sort -V | tail -n 1)}
[ -x "${PY:-}" ] || { log 'needs a Python 3.12 (pyenv, or set PYTHON312)'; exit 1; }
SDIST_PY=${PYTHON:-$ROOT/.venv/bin/python}
[ -x "$SDIST_PY" ] || { log "needs $SDIST_PY (make install) to read mmcv's source archive"; exit 1; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$KIT"
mkdir -p "$KIT/wheels"

log "resolving $(grep -c '==' "$WANT") packages for the node's Python 3.12 beside its own"
grep '==' "$NODE" > "$tmp/node_pins.txt"
"$PY" -m pip install -q --dry-run --ignore-installed "${TARGET[@]}" --target "$tmp/target" \
  --report "$tmp/report.json" -c "$tmp/node_pins.txt" -r "$WANT"
"$PY" - "$tmp/report.json" "$NODE" "$KIT/from_node.txt" > "$tmp/carry.txt" <<'EOF'
import json
import re
import sys

def canonical(name):
    return re.sub(r'[-_.]+', '-', name).lower()

report, node, from_node = sys.argv[1:]
have = {canonical(line.split('==')[0].strip()) for line in open(node)
        if line.strip() and not line.startswith('#')}
# the node's opencv-python-headless provides the cv2 that mmengine's opencv-python requirement is for
have.add('opencv-python')
# what the node must provide itself: the rehearsal installs these (at the node's versions where known)
with open(from_node, 'w') as provided:
    for item in json.load(open(report))['install']:
        meta = item['metadata']
        if canonical(meta['name']) not in have:
            print(f"{meta['name']}=={meta['version']}")
        elif canonical(meta['name']) != 'opencv-python':
            provided.write(f"{canonical(meta['name'])}\n")
EOF
# mmcv's setup.py imports pkg_resources, which setuptools >= 81 no longer has: the node's may be newer
grep '^setuptools==' "$WANT" >> "$tmp/carry.txt"
log "carrying $(wc -l < "$tmp/carry.txt") wheels: $(tr '\n' ' ' < "$tmp/carry.txt")"
"$PY" -m pip download -q --no-deps "${TARGET[@]}" -d "$KIT/wheels" -r "$tmp/carry.txt"

mmcv=$(sed -n 's/^mmcv-lite==\(.*\)/\1/p' "$WANT")
log "mmcv $mmcv source archive"
"$SDIST_PY" -m pip download -q --no-deps --no-build-isolation --no-binary :all: "mmcv==$mmcv" -d "$KIT"
cp "$ROOT/.dev_scripts/gpu_kit/run.sh" "$KIT/run.sh"
cp "$tmp/carry.txt" "$KIT/carried.txt"

size_kib=$(du -sk "$KIT" | cut -f1)
log "wrote $KIT: $(ls "$KIT/wheels" | wc -l) wheels + mmcv-$mmcv.tar.gz, $((size_kib / 1024)).$((size_kib % 1024 * 10 / 1024)) MiB"
if [ "$size_kib" -gt $((MAX_MIB * 1024)) ]; then
  log "the kit is over $MAX_MIB MiB: it would not travel with the checkout"
  exit 1
fi
