#!/usr/bin/env bash
# The demo job: write the embedded dataset, train PVTv2-b0 Mask R-CNN and
# UperNet on it on the CPU, evaluate with the real metrics (COCO AP, mIoU),
# save pictures of the predictions, print the metric table, and run the
# trained Mask R-CNN (else the first config) on one picture (tools/infer.py).
#   DEMO_CONFIGS="configs/demo/a.py configs/demo/b.py" bash tools/demo.sh
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"
PY=${PYTHON:-$ROOT/.venv/bin/python}
CONFIGS=${DEMO_CONFIGS:-configs/demo/pvtv2_b0_maskrcnn_demo.py configs/demo/pvtv2_b0_upernet_demo.py}

"$PY" tools/make_demo_data.py --root data/demo
dirs=()
for cfg in $CONFIGS; do
  name=$(basename "$cfg" .py)
  work=work_dirs/$name
  echo "[demo] training $cfg -> $work"
  "$PY" tools/train.py "$cfg" --work-dir "$work"
  echo "[demo] evaluating $(cat "$work/last_checkpoint")"
  "$PY" tools/test.py "$cfg" "$(cat "$work/last_checkpoint")" --work-dir "$work" \
      --show-dir "$ROOT/$work/vis"
  dirs+=("$work")
done
"$PY" tools/summarize_metrics.py "${dirs[@]}"

infer_cfg=
for cfg in $CONFIGS; do
  if [[ $cfg == *maskrcnn* ]]; then infer_cfg=$cfg; break; fi
done
set -- $CONFIGS
infer_cfg=${infer_cfg:-$1}
work=work_dirs/$(basename "$infer_cfg" .py)
pictures=(data/demo/coco/val/*.jpg)
echo "[demo] inference with $infer_cfg on ${pictures[0]}"
"$PY" tools/infer.py "$infer_cfg" "$(cat "$work/last_checkpoint")" "${pictures[0]}" \
    --out-dir "$work/infer"
