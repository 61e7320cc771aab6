#!/usr/bin/env bash
# Training on a Slurm cluster, one task per GPU (mmdet-style):
#   [GPUS=16] [GPUS_PER_NODE=8] [CPUS_PER_TASK=5] [SRUN_ARGS="..."] \
#   tools/slurm_train.sh PARTITION JOB_NAME CONFIG WORK_DIR [train.py args, e.g. --resume]
# GPUS is the total over all nodes; Slurm places GPUS/GPUS_PER_NODE nodes.
# A task that fails ends the whole job (--kill-on-bad-exit).
# Preemption: Slurm sends SIGTERM SIGNAL_AHEAD seconds (default 120) before the time limit, as when it
# preempts; the run finishes its iteration, writes a checkpoint and exits with 143. Inside a batch job
# (sbatch) the job is then requeued, and a requeued job resumes (--resume is added).
set -euo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 PARTITION JOB_NAME CONFIG WORK_DIR [train.py args]" >&2
  exit 2
fi
PARTITION=$1
JOB_NAME=$2
CONFIG=$3
WORK_DIR=$4
GPUS=${GPUS:-8}
GPUS_PER_NODE=${GPUS_PER_NODE:-$(( GPUS < 8 ? GPUS : 8 ))}
CPUS_PER_TASK=${CPUS_PER_TASK:-5}
SRUN_ARGS=${SRUN_ARGS:-""}
SIGNAL_AHEAD=${SIGNAL_AHEAD:-120}
PREEMPTED=143
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PYTHON=${PYTHON:-$( [ -x "$ROOT/.venv/bin/python" ] && echo "$ROOT/.venv/bin/python" || echo python)}

EXTRA=("${@:5}")
if [ "${SLURM_RESTART_COUNT:-0}" -gt 0 ] && [[ " ${EXTRA[*]} " != *" --resume"* ]]; then
  EXTRA+=(--resume)   # a requeued job continues from its last checkpoint
fi

status=0
# shellcheck disable=SC2086  # SRUN_ARGS holds several options
srun -p "$PARTITION" --job-name="$JOB_NAME" \
    --gres=gpu:"$GPUS_PER_NODE" --ntasks="$GPUS" --ntasks-per-node="$GPUS_PER_NODE" \
    --cpus-per-task="$CPUS_PER_TASK" --kill-on-bad-exit=1 --signal=TERM@"$SIGNAL_AHEAD" $SRUN_ARGS \
    "$PYTHON" -u "$ROOT/tools/train.py" "$CONFIG" --work-dir="$WORK_DIR" --launcher slurm \
    "${EXTRA[@]}" || status=$?
if [ "$status" -eq "$PREEMPTED" ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "[slurm_train] preempted: checkpoint written; requeueing job $SLURM_JOB_ID" >&2
  scontrol requeue "$SLURM_JOB_ID"
fi
exit "$status"
