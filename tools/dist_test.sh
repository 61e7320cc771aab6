#!/usr/bin/env bash
# Distributed testing with torchrun: tools/dist_test.sh CONFIG CHECKPOINT GPUS [test.py args]
# Multi-node: set NNODES, NODE_RANK, MASTER_ADDR (and PORT) on every node.
# Without GPUs it runs GPUS processes on the CPU with the gloo backend.
set -euo pipefail
CONFIG=$1
CHECKPOINT=$2
GPUS=$3
NNODES=${NNODES:-1}
NODE_RANK=${NODE_RANK:-0}
PORT=${PORT:-29500}
MASTER_ADDR=${MASTER_ADDR:-127.0.0.1}
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}

OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} \
exec "$PYTHON" -m torch.distributed.run \
    --nnodes="$NNODES" --node_rank="$NODE_RANK" --master_addr="$MASTER_ADDR" \
    --nproc_per_node="$GPUS" --master_port="$PORT" \
    "$ROOT/tools/test.py" "$CONFIG" "$CHECKPOINT" --launcher pytorch "${@:4}"
