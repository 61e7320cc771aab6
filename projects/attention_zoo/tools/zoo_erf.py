"""Effective receptive fields of the attention zoo's variants, one panel
each (the library's ERF tool, ``tools/analysis/erf.py``, on the variants'
backbones):

    python projects/attention_zoo/tools/zoo_erf.py --stage 3 --size 224 \
        --figure projects/attention_zoo/zoo_erf.png
    python projects/attention_zoo/tools/zoo_erf.py sra@quick hilo@quick --size 64
"""
from __future__ import annotations

import argparse
import sys

import project_paths  # noqa: F401  (before the imports below)
import erf
from attention_zoo import backbone_config, parse_spec, variants
from vattn_mm.analysis.erf import backbone_model


def variant_model(spec: str, checkpoint=None):
    return backbone_model(spec, backbone_config(spec), checkpoint)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description='Effective receptive fields of the zoo variants')
    parser.add_argument('variants', nargs='*', metavar='VARIANT',
                        help='<variant> or <variant>@quick (tiny widths); default: all')
    erf.add_options(parser)
    parser.add_argument('--name', default='zoo_erf', help='file stem')
    args = parser.parse_args(argv)
    args.variants = args.variants or variants()
    for spec in args.variants:
        try:
            parse_spec(spec)
        except ValueError as err:
            parser.error(str(err))
    erf.check_options(parser, args, len(args.variants))
    return erf.run(args, [(v, variant_model) for v in args.variants])


if __name__ == '__main__':
    sys.exit(main())
