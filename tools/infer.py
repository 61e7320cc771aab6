"""Run a trained detector, segmentor or classifier on pictures.

    python tools/infer.py CONFIG CHECKPOINT IMAGE_OR_FOLDER [--out-dir DIR] [--device DEVICE]
                          [--score-thr 0.3] [--trust-checkpoint] [--backend onnxruntime]

The task comes from the config (its ``default_scope``, else its model type):
mmdet (detection, instance segmentation), mmseg (semantic segmentation) or
mmpretrain (classification), run through the upstream ``DetInferencer``,
``MMSegInferencer`` and ``ImageClassificationInferencer``.  CHECKPOINT (a file
or an http(s) URL) is read with vattn-mm's safe loader and must fit the
config's model exactly.  A folder is read without its sub-folders.

OUT_DIR (default ``work_dirs/<config name>/infer``) receives the pictures with
the predictions drawn (``vis/``), the predictions as JSON (``preds/``) and an
index, ``infer.json`` (the layout: :mod:`vattn_mm.apis.inference`).

Every input is checked before the model runs, and the outputs are written into
a temporary folder beside OUT_DIR that replaces it at the end: a failed run
leaves OUT_DIR as it was.  An existing OUT_DIR is replaced only if it is empty
or an earlier output of this tool.  The library: :func:`vattn_mm.apis.infer`.

``--backend onnxruntime`` runs the backbone (and neck) in onnxruntime on the
CPU, the heads in PyTorch: exported once per weights (cached in
``torch.hub.get_dir()/onnx``, named by the weights' hash) and checked against
PyTorch in every run; which backend is faster for which backbone:
docs/benchmarks.md.
"""
from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from vattn_mm.apis import BACKENDS, INDEX, InferError, infer
from vattn_mm.backbones import CheckpointError
from vattn_mm.deploy import OnnxCheckError
from vattn_mm.utils import (CheckpointDownloadError, UnreadableCheckpointError,
                            UntrustedCheckpointError)


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('config', help='mmdet, mmseg or mmpretrain config file')
    parser.add_argument('checkpoint', help='checkpoint file or http(s) URL')
    parser.add_argument('input', help='an image or a folder of images')
    parser.add_argument('--out-dir', help='output folder (default: work_dirs/<config name>/infer)')
    parser.add_argument('--device', help='e.g. cpu, cuda, cuda:1 (default: cuda if available)')
    parser.add_argument('--score-thr', type=float, default=0.3,
                        help='detection: draw boxes scoring at least this (the JSON has all)')
    parser.add_argument('--backend', choices=BACKENDS, default='pytorch',
                        help='what runs the backbone (and neck): pytorch, or onnxruntime '
                             '(CPU; the export cached and checked against PyTorch)')
    parser.add_argument('--trust-checkpoint', action='store_true',
                        help='allow full unpickling of CHECKPOINT (only for a trusted source)')
    return parser.parse_args(argv)


def main(argv: Optional[Sequence[str]] = None) -> None:
    args = parse_args(argv)
    try:
        out_dir = infer(args.config, args.checkpoint, args.input, args.out_dir,
                        device=args.device, score_thr=args.score_thr,
                        trusted=args.trust_checkpoint, backend=args.backend)
    except (InferError, CheckpointError, CheckpointDownloadError, UnreadableCheckpointError,
            UntrustedCheckpointError, OnnxCheckError, FileNotFoundError) as err:
        sys.exit(f'tools/infer.py: error: {err}')
    print(f'pictures in {out_dir}/vis, predictions in {out_dir}/preds, index {out_dir}/{INDEX}')


if __name__ == '__main__':
    main()
