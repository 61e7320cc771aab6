"""Export a backbone (or a config's backbone + neck) to ONNX with dynamic
height and width, then check it in onnxruntime against PyTorch.

    # a registered backbone, official release or vattn-mm checkpoint (loaded strictly)
    python tools/deploy/export_onnx.py PVTv2:b2 checkpoints/pvt_v2_b2.pth --out pvtv2_b2.onnx
    # backbone + neck of an mmdet / mmseg config, weights of a trained model
    python tools/deploy/export_onnx.py configs/pvtv2_b2_maskrcnn_coco.py \\
        work_dirs/pvtv2_b2_maskrcnn_coco/epoch_12.pth --out pvtv2_b2_fpn.onnx
    # structure only (random weights)
    python tools/deploy/export_onnx.py QuadTree:b0 --random-init --out qt_b0.onnx

Every output is compared at every --check-sizes size; relative error =
max|onnxruntime - PyTorch| / max|PyTorch|.  Exit status 1 when one exceeds
--rtol, 2 on bad arguments or a checkpoint that does not fit.

A model with a top-k selection (QuadTree) is also exported, to a temporary
checking file, with every selection's indices as extra outputs (the --out
file stays plain).  Where onnxruntime's selection differs from PyTorch's
(near-equal scores flip on rounding), the errors are against PyTorch pinned
to onnxruntime's selection (marked *), and the check also fails where a
differing selection kept a key scoring more than --tie-tol (relative to the
row's largest |score|) below PyTorch's k-th best: a wrong key, not a tie.
"""
from __future__ import annotations

import argparse
import os.path as osp
import sys

from torch import nn

from vattn_mm.analysis import build_spec
from vattn_mm.analysis.model_spec import is_backbone_spec, strip_pretrained
from vattn_mm.backbones import (CheckpointError, extract_state_dict, load_pretrained,
                                read_checkpoint)
from vattn_mm.deploy import (DEFAULT_TIE_TOL, BackboneNeck, check_onnx, export_onnx,
                             format_checks)

DEFAULT_CHECK_SIZES = ((512, 512), (640, 800), (421, 397))


def build_from_config(path: str, checkpoint: str | None) -> nn.Module:
    """Backbone (+ neck if any) of the config ``path`` with the weights of a
    trained model's ``state_dict`` (strict)."""
    from mmengine.config import Config
    from mmengine.registry import MODELS, DefaultScope
    cfg = Config.fromfile(path)
    if 'model' not in cfg or 'backbone' not in cfg.model:
        raise ValueError(f'{path} has no model.backbone')
    scope = cfg.get('default_scope', 'mmdet')
    model_cfg = strip_pretrained(cfg.model.to_dict())
    with DefaultScope.overwrite_default_scope(scope):
        parts = {'backbone': MODELS.build(model_cfg['backbone'])}
        if model_cfg.get('neck'):
            parts['neck'] = MODELS.build(model_cfg['neck'])
    if checkpoint is not None:
        sd = extract_state_dict(read_checkpoint(checkpoint), prefix='')   # the whole model
        for name, module in parts.items():
            own = {k[len(name) + 1:]: v for k, v in sd.items() if k.startswith(name + '.')}
            missing, unexpected = module.load_state_dict(own, strict=False)
            if missing or unexpected or not own:
                raise CheckpointError(
                    f'{checkpoint!r} does not fit the {name} of {path}: missing '
                    f'{sorted(missing)[:5]}, unexpected {sorted(unexpected)[:5]}'
                    + (f' (no {name}.* keys)' if not own else ''))
    if 'neck' in parts:
        return BackboneNeck(parts['backbone'], parts['neck'])
    return parts['backbone']


def build_model(spec: str, checkpoint: str | None) -> nn.Module:
    if is_backbone_spec(spec):
        model = build_spec(spec)
        if checkpoint is not None:
            load_pretrained(model, checkpoint, type(model).checkpoint_converter())
        else:
            model.init_weights()
        return model
    if not osp.isfile(spec):
        raise ValueError(f'{spec!r} is neither a Family:arch spec nor a config file')
    return build_from_config(spec, checkpoint)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('spec', help="'Family:arch' (e.g. PVTv2:b2) or an mmdet / mmseg config")
    parser.add_argument('checkpoint', nargs='?', help='weights (required unless --random-init)')
    parser.add_argument('--out', required=True, help='the .onnx file to write')
    parser.add_argument('--random-init', action='store_true',
                        help='export the structure with random weights (no checkpoint)')
    parser.add_argument('--size', type=int, nargs=2, default=(512, 512), metavar=('H', 'W'),
                        help='export size (default 512 512); H and W stay dynamic')
    parser.add_argument('--check-sizes', type=int, nargs='+', metavar='SIDE',
                        help='H W pairs to check at (default 512 512 640 800 421 397)')
    parser.add_argument('--opset', type=int, default=None, help='ONNX opset (default 17)')
    parser.add_argument('--rtol', type=float, default=1e-4,
                        help='largest relative error accepted (default 1e-4)')
    parser.add_argument('--tie-tol', type=float, default=DEFAULT_TIE_TOL,
                        help='top-k models: largest score gap (relative to the row\'s largest '
                             '|score|) of a key onnxruntime kept in place of one of PyTorch\'s '
                             f'(default {DEFAULT_TIE_TOL:g})')
    parser.add_argument('--threads', type=int, default=None, help='onnxruntime threads')
    args = parser.parse_args(argv)
    if (args.checkpoint is None) != args.random_init:
        parser.error('give a checkpoint, or --random-init for a structural export (not both)')
    if args.check_sizes is not None and len(args.check_sizes) % 2:
        parser.error('--check-sizes takes H W pairs')
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    sizes = (DEFAULT_CHECK_SIZES if args.check_sizes is None else
             tuple(zip(args.check_sizes[::2], args.check_sizes[1::2])))
    try:
        model = build_model(args.spec, args.checkpoint)
    except (CheckpointError, ValueError, KeyError, FileNotFoundError) as error:
        print(f'error: {error}', file=sys.stderr)
        return 2
    names = export_onnx(model, args.out, tuple(args.size), opset=args.opset)
    print(f'exported {args.spec} at {args.size[0]}x{args.size[1]} (dynamic H, W) -> {args.out} '
          f'({len(names)} outputs)')
    checks = check_onnx(model, args.out, sizes, rtol=args.rtol, threads=args.threads,
                        export_size=tuple(args.size), opset=args.opset, tie_tol=args.tie_tol)
    print(format_checks(checks))
    worst = max(c.rel_error for c in checks)
    failed = [c for c in checks if not c.ok]
    print(f'max relative error {worst:.2e} (rtol {args.rtol:g}'
          + (', * pinned to onnxruntime\'s top-k selection' if any(c.pinned for c in checks)
             else '') + '): '
          + ('OK' if not failed else f'{len(failed)} of {len(checks)} outputs FAIL'))
    return 1 if failed else 0


if __name__ == '__main__':
    sys.exit(main())
