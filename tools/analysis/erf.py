"""Effective receptive fields (RepLKNet's protocol, arXiv:2203.06717) of
backbones at one stage, as heat maps and high-contribution area ratios
(library: :mod:`vattn_mm.analysis.erf`).

    python tools/analysis/erf.py configs/pvtv2_b2_maskrcnn_coco.py --checkpoint CKPT --images DIR
    python tools/analysis/erf.py PVTv2:b2 FocalNet:tiny_srf --stage 2     # one panel each

Writes ``<name>.png`` (one panel per model), ``<name>.npz`` (the
contribution maps) and ``<name>.json`` (settings and area ratios) to
``--out`` and prints the area-ratio table.
"""
from __future__ import annotations

import argparse
import shutil
import sys
import time
from pathlib import Path

import torch

from vattn_mm.analysis.erf import (GRADIENTS, THRESHOLDS, compute_erf, folder_images,
                                   load_model, procedural_images, ratio_table, write_results)
from vattn_mm.backbones.loading import CheckpointError


def add_options(parser: argparse.ArgumentParser) -> None:
    """The options of every ERF run (the attention zoo's tool takes them too)."""
    parser.add_argument('--checkpoint', help='weights (file or URL) for the one model given; '
                                             'default: random init')
    parser.add_argument('--stage', type=int, default=-1,
                        help='stage index from 0 (negative: from the end; default the last)')
    parser.add_argument('--images', help='folder of images (resized to --size); default: '
                                         'procedural demo scenes drawn with --seed')
    parser.add_argument('--num-images', type=int, default=10)
    parser.add_argument('--size', type=int, default=224, help='square input side')
    parser.add_argument('--batch-size', type=int, default=1)
    parser.add_argument('--gradient', choices=GRADIENTS, default='relu',
                        help="relu: RepLKNet's positive contributions; abs: magnitudes")
    parser.add_argument('--seed', type=int, default=0,
                        help='seed of the random init and of the procedural images')
    parser.add_argument('--threads', type=int, help='torch threads (default: torch\'s)')
    parser.add_argument('--out', default='work_dirs/erf', help='output folder')
    parser.add_argument('--figure', type=Path, help='also copy the PNG here')


def check_options(parser: argparse.ArgumentParser, args: argparse.Namespace,
                  num_models: int) -> None:
    if not num_models:
        parser.error('give at least one model')
    if args.checkpoint and num_models != 1:
        parser.error(f'--checkpoint applies to one model; {num_models} given')
    if args.images and not Path(args.images).is_dir():
        parser.error(f'--images: no such folder {args.images}')
    for flag in ('num_images', 'size', 'batch_size'):
        if getattr(args, flag) < 1:
            parser.error(f'--{flag.replace("_", "-")} must be >= 1')


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Effective receptive fields of backbones')
    parser.add_argument('models', nargs='*', metavar='MODEL',
                        help='config files (detection, segmentation, classification or a bare '
                             '`backbone = dict(...)`) or Family:arch specs (PVTv2:b2)')
    add_options(parser)
    parser.add_argument('--name', default='erf', help='file stem')
    args = parser.parse_args(argv)
    check_options(parser, args, len(args.models))
    return args


def run(args: argparse.Namespace, builds: list) -> int:
    """The ERF of each ``(spec, build)`` in ``builds`` (``build(spec,
    checkpoint)`` gives the :class:`~vattn_mm.analysis.erf.ErfModel`), written and printed."""
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.images:
        images = folder_images(args.images, args.size, args.num_images)
        source = f'{len(images)} images of {args.images}'
    else:
        images = procedural_images(args.num_images, args.size, args.seed)
        source = f'{len(images)} procedural demo scenes (seed {args.seed})'
    erfs, weights = [], {}
    start = time.perf_counter()
    for spec, build in builds:
        torch.manual_seed(args.seed)
        try:
            model = build(spec, args.checkpoint)
            erf = compute_erf(model, args.stage, images, batch_size=args.batch_size,
                              gradient=args.gradient)
        except (FileNotFoundError, ValueError, TypeError, CheckpointError) as err:
            print(f'error: {spec}: {err}', file=sys.stderr)
            return 2
        weights[model.name] = model.weights
        erfs.append(erf)
        print(f'[erf] {model.name}: stage {erf.stage}, {erf.num_images} images', flush=True)
    seconds = time.perf_counter() - start
    stages = '/'.join(str(s) for s in sorted({erf.stage for erf in erfs}))
    how = (f'{source}, {args.size}x{args.size}, stage {stages}, gradient {args.gradient}, '
           f'cpu fp32, {torch.get_num_threads()} threads')
    settings = dict(title=f'ERF: {how}', images=source, size=args.size, stage=args.stage,
                    gradient=args.gradient, seed=args.seed, thresholds=list(THRESHOLDS),
                    weights=weights, threads=torch.get_num_threads(), seconds=round(seconds, 1),
                    torch=torch.__version__)
    paths = write_results(erfs, Path(args.out), args.name, settings)
    if args.figure is not None:
        args.figure.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(paths[0], args.figure)
    print(f'{how}; {seconds:.0f} s\n')
    print(ratio_table(erfs))
    print(f'\nwritten: {", ".join(map(str, paths))}'
          + (f', {args.figure}' if args.figure is not None else ''))
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    return run(args, [(m, load_model) for m in args.models])


if __name__ == '__main__':
    sys.exit(main())
