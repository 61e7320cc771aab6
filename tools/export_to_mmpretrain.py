"""Export a vattn-mm backbone as an mmpretrain ImageClassifier (config + checkpoint).

    # a trained detector / segmentor (its backbone; the linear head starts untrained)
    python tools/export_to_mmpretrain.py work_dirs/x/epoch_12.pth --config configs/x.py \\
        --out-dir exported
    # an official released ImageNet checkpoint (backbone + classifier: the official logits)
    python tools/export_to_mmpretrain.py pvt_v2_b2.pth --family pvtv2 --arch b2 --out-dir exported

Writes DIR/NAME.py (ImageClassifier: the same registered backbone with
out_indices=(last stage,), GlobalAveragePooling, LinearClsHead; inherits
mmpretrain's ImageNet data / runtime bases; custom_imports=['vattn_mm']) and
DIR/NAME.pth, which loads strictly.  Use them with mmpretrain as usual:

    ImageClassificationInferencer('DIR/NAME.py', pretrained='DIR/NAME.pth')
    python tools/test.py DIR/NAME.py DIR/NAME.pth

An official classifier's final norm becomes the last stage's output norm and the
backbone runs in the ImageNet model's settings (QuadTree: top-k 8 / GELU value
branches; FocalNet: the release's focal windows and conv-stem padding 2).
"""
import argparse
import sys
from pathlib import Path
from urllib.parse import urlsplit

import vattn_mm  # noqa: F401  (registers the backbones)
from vattn_mm.backbones import CheckpointError, released_families
from vattn_mm.checkpoint.convert import parse_arch_arg
from vattn_mm.checkpoint.export import (export_official, export_trained,
                                        write_export)
from vattn_mm.utils import is_url


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog='\n'.join(__doc__.splitlines()[1:]))
    parser.add_argument('src', help='checkpoint to export (file or http(s) URL)')
    parser.add_argument('--config', help='the config SRC was trained with (vattn-mm checkpoints)')
    parser.add_argument('--family', choices=sorted(released_families()), help='official checkpoints')
    parser.add_argument('--arch', type=parse_arch_arg,
                        help='official checkpoints: variant name or dict literal')
    parser.add_argument('--num-classes', type=int,
                        help='classes of the head when SRC has no ImageNet head (default 1000)')
    parser.add_argument('--out-dir', required=True, help='output folder')
    parser.add_argument('--name', help='output file stem (default: <SRC stem>_mmpretrain)')
    parser.add_argument('--overwrite', action='store_true', help='replace existing outputs')
    args = parser.parse_args(argv)
    if (args.config is None) == (args.family is None):
        parser.error('pass --config (vattn-mm checkpoint) or --family/--arch '
                     '(official checkpoint), not both')
    if args.family is not None and args.arch is None:
        parser.error('--family needs --arch')
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.config is not None:
        export = export_trained(args.src, args.config, args.num_classes or 1000)
    else:
        export = export_official(args.src, args.family, args.arch, args.num_classes)
    src_path = urlsplit(args.src).path if is_url(args.src) else args.src
    name = args.name or f'{Path(src_path).stem}_mmpretrain'
    cfg_path, ckpt_path = write_export(export, args.out_dir, name, args.overwrite, args.src)
    print(f'config:     {cfg_path}\ncheckpoint: {ckpt_path} ({len(export.state_dict)} tensors, '
          f'{"with" if export.has_head else "without"} the ImageNet head)')
    for note in export.notes:
        print(note)


if __name__ == '__main__':
    try:
        main()
    except (CheckpointError, FileExistsError, FileNotFoundError, ValueError) as err:
        sys.exit(f'error: {err}')
