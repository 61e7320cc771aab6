"""Convert checkpoints between the official layouts and vattn-mm.

    # official released ImageNet checkpoint -> vattn-mm backbone checkpoint
    python tools/convert_checkpoint.py pvt_v2_b2.pth pvtv2_b2_vattn.pth --family pvtv2 --arch b2
    # vattn-mm (backbone file, or a whole detector / segmentor checkpoint) -> official keys
    python tools/convert_checkpoint.py work_dirs/x/epoch_12.pth pvt_v2_b2_det.pth \\
        --to official --family pvtv2
    # official detection / segmentation checkpoint (mmdet 2.x / mmseg 0.x) -> for a config
    python tools/convert_checkpoint.py mask_rcnn_pvt_v2_b2_fpn_1x_coco.pth pvtv2_b2_maskrcnn.pth \\
        --config configs/pvtv2_b2_maskrcnn_coco.py

--arch is checked: the backbone is built on the meta device and the family's
converter must match every key, otherwise the error names the missing /
unexpected / mis-shaped keys.  A file converted from an official release keeps
the classifier keys the backbone does not use (head.*, final norm) and the
release's wrapper, so converting it back restores the release exactly.
With --config, the whole detector / segmentor is converted (backbone through
its family's converter, neck and heads as they are) and must fit the config's
model exactly; the output is an mmengine checkpoint for tools/test.py.
"""
import argparse
import sys

import vattn_mm  # noqa: F401  (registers the backbones)
from vattn_mm.backbones import CheckpointError, released_families
from vattn_mm.checkpoint import convert_dense_file
from vattn_mm.checkpoint.convert import (convert_official_file, convert_to_official_file,
                                         parse_arch_arg)

EPILOG = """\
Values that change: P2T's 1x1-conv FFN weights become linear weights (and back).
FocalNet: with an --arch whose focal windows are larger than the release's
(the dense variants, e.g. tiny_srf: 9 vs 3) the kernels are zero-padded at the
centre, which keeps the features; --to official crops them back to the released
size when the file records it (files written by this tool) and the cropped border
is zero, and otherwise writes them at the model's window size, which the official
detection / segmentation code loads and the official classification code does not.
Dense-only tensors (e.g. LITv2 / FocalNet / DilateFormer output norms) have no
official ImageNet counterpart: --to official keeps them (FocalNet as the official
dense norm0..norm3) unless --drop-dense-only.
"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__.splitlines()[0], epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('src', help='input checkpoint (file, or http(s) URL)')
    parser.add_argument('out', help='output checkpoint (never the input)')
    parser.add_argument('--to', choices=['vattn', 'official'], default='vattn',
                        help='direction (default: official -> vattn)')
    parser.add_argument('--family', choices=sorted(released_families()),
                        help='backbone family (--to official: default from the file)')
    parser.add_argument('--arch', type=parse_arch_arg,
                        help="variant name (e.g. b2) or a dict literal of official "
                             "hyper-parameters; required for --to vattn")
    parser.add_argument('--config',
                        help='convert a whole detection / segmentation checkpoint for the '
                             'model of this config (the family comes from its backbone)')
    parser.add_argument('--drop-dense-only', action='store_true',
                        help='--to official: drop dense-only tensors')
    parser.add_argument('--overwrite', action='store_true', help='replace an existing OUT')
    args = parser.parse_args(argv)
    if args.config is not None:
        extra = [option for option, given in (
            ('--family', args.family is not None), ('--arch', args.arch is not None),
            ('--to official', args.to != 'vattn'), ('--drop-dense-only', args.drop_dense_only))
            if given]
        if extra:
            parser.error(f'--config converts for the config\'s model (family and arch from '
                         f'its backbone); drop {", ".join(extra)}')
    elif args.to == 'vattn' and (args.family is None or args.arch is None):
        parser.error('official -> vattn needs --family and --arch (or --config)')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.config is not None:
        conv = convert_dense_file(args.src, args.out, args.config, args.overwrite)
        print(f'{len(conv.state_dict)} tensors ({conv.source_format} backbone) written to '
              f'{args.out}; it loads strictly into the model of {args.config}')
        notes = conv.notes
    elif args.to == 'vattn':
        conv = convert_official_file(args.src, args.out, args.family, args.arch,
                                     args.overwrite)
        print(f'{len(conv.state_dict)} backbone tensors written to {args.out}; kept '
              f'{len(conv.official_only)} official-only tensors '
              f'({", ".join(sorted(conv.official_only)) or "none"}) for --to official')
        notes = conv.notes
    else:
        notes = convert_to_official_file(args.src, args.out, args.family, args.arch,
                                         args.drop_dense_only, args.overwrite)
        print(f'official {args.family or "(recorded family)"} checkpoint written to {args.out}')
    for note in notes:
        print(note)


if __name__ == '__main__':
    try:
        main()
    except (CheckpointError, FileExistsError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
