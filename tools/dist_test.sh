#!/usr/bin/env bash
# Distributed testing with torchrun: tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args]
# One machine: torchrun picks a free port itself (set PORT to fix one). Multi-node: set NNODES,
# NODE_RANK, MASTER_ADDR and PORT on every node.
# Without GPUs it runs GPUS processes on the CPU with the gloo backend.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}

if [ "$NNODES" = 1 ] && [ -z "${PORT:-}" ]; then
  RENDEZVOUS=(--standalone)
else
  RENDEZVOUS=(--nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="${MASTER_ADDR:-127.0.0.1}"
              --master_port="${PORT:-29500}")
fi

OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} \
exec "$PYTHON" -m torch.distributed.run "${RENDEZVOUS[@]}" --nproc_per_node="$GPUS" \
    "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
