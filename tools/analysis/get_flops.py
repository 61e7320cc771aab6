"""Parameters and FLOPs (multiply-adds, the papers' convention) of a backbone
or of the whole model of a config.

    python tools/analysis/get_flops.py PVTv2:b2 --shape 800 1344
    python tools/analysis/get_flops.py FocalNet:tiny_srf --imagenet          # paper convention
    python tools/analysis/get_flops.py configs/pvtv2_b2_maskrcnn_coco.py --shape 800 1344 --depth 3
    python tools/analysis/get_flops.py --published      # every released model: paper vs ours

Counted: every matrix product and convolution (attention ``QK^T`` / ``AV``
through ``scaled_dot_product_attention`` included), QuadTree's gathered
top-k scores / aggregation, DilateFormer's dilated attention, focal
modulation's gating products and LITv2's deformable convolutions (as the
convolution they compute); not counted: biases, norms, activations, softmax,
pooling.  ``--imagenet`` measures the released ImageNet classifier (ImageNet
hyper-parameters, pooled last stage + 1000-class head), the model the papers'
tables describe.  See ``vattn_mm/analysis/complexity.py``.
"""
from __future__ import annotations

import argparse
import sys

from vattn_mm.analysis import spec_complexity
from vattn_mm.analysis.published_complexity import PUBLISHED, SOURCES, TOLERANCE, agrees


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description='Parameters and multiply-adds of a model')
    parser.add_argument('target', nargs='?',
                        help='config file, or a backbone as Family:arch (e.g. PVTv2:b2)')
    parser.add_argument('--shape', type=int, nargs='+', default=[224, 224],
                        help='input size: H W, or one side (default 224 224)')
    parser.add_argument('--imagenet', action='store_true',
                        help='backbone only: the released ImageNet classifier (paper convention)')
    parser.add_argument('--depth', type=int, default=0,
                        help='also print the MACs per module down to this depth')
    parser.add_argument('--published', action='store_true',
                        help='compare every released model with its published numbers '
                             '(markdown table)')
    args = parser.parse_args(argv)
    if not args.published and args.target is None:
        parser.error('give a config or a Family:arch backbone, or --published')
    if len(args.shape) not in (1, 2) or min(args.shape) < 1:
        parser.error(f'--shape takes one or two positive sides, got {args.shape}')
    return args


def published_table() -> tuple[str, bool]:
    """Markdown table paper vs ours for :data:`PUBLISHED` (with the source
    legend); and whether all agree."""
    lines = ['| model | input | params (M) published | ours | GFLOPs published | ours | diff | '
             'source |', '|---|---|---|---|---|---|---|---|']
    all_agree = True
    for entry in PUBLISHED:
        cx = spec_complexity(entry.spec, entry.shape, imagenet=True)
        params, gmacs = cx.params / 1e6, cx.macs / 1e9
        cells = [entry.spec, f'{entry.shape[0]}x{entry.shape[1]}']
        for published, ours in ((entry.params_m, params), (entry.gflops, gmacs)):
            ok = published is None or agrees(ours, published)
            all_agree &= ok
            cells += ['-' if published is None else f'{published:g}',
                      f'{ours:.2f}' + ('' if ok else ' ✗')]
        diff = '-'
        if entry.gflops is not None:
            rel = gmacs / entry.gflops - 1
            diff = f'{rel:+.1%}' + (' †' if abs(rel) > TOLERANCE and agrees(gmacs, entry.gflops)
                                     else '')
        lines.append('| ' + ' | '.join(cells + [diff, entry.source]) + ' |')
    lines += ['', f'✗: more than {TOLERANCE:.0%} off. †: more than {TOLERANCE:.0%} off but '
              'within the rounding of the published figure.', '']
    lines += [f'- {key}: {text}' for key, text in SOURCES.items()]
    return '\n'.join(lines), all_agree


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.published:
        table, ok = published_table()
        print(table)
        return 0 if ok else 1
    shape = tuple(args.shape * 2 if len(args.shape) == 1 else args.shape)
    try:
        cx = spec_complexity(args.target, shape, imagenet=args.imagenet)
    except (ValueError, FileNotFoundError) as err:
        print(f'get_flops: error: {err}', file=sys.stderr)
        return 2
    what = ' (ImageNet classifier: backbone + 1000-class head)' if args.imagenet else ''
    line = '=' * 40
    print(f'{line}\nModel: {args.target}{what}\nInput shape: 1x3x{shape[0]}x{shape[1]}\n'
          f'Params: {cx.params / 1e6:.2f} M\nFLOPs (multiply-adds): {cx.macs / 1e9:.3f} G\n{line}')
    if args.depth:
        print(cx.table(args.depth))
    return 0


if __name__ == '__main__':
    sys.exit(main())
