"""The weights table: the model index (model-index.yml, configs/metafiles/) against
the configs and docs/backbones.md.

    python tools/model_zoo.py --check   # list every problem, exit 1 if any
    python tools/model_zoo.py --write   # rewrite the table in docs/backbones.md from the index

What is checked: :mod:`vattn_mm.checkpoint.zoo_docs`.
"""
import argparse
import sys

from vattn_mm.checkpoint.released import released_weights
from vattn_mm.checkpoint.zoo_docs import ROOT, all_problems, write_docs


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument('--check', action='store_true', help='list every problem; exit 1 if any')
    mode.add_argument('--write', action='store_true', help='rewrite the docs table, then check')
    args = parser.parse_args()
    if args.write:
        write_docs()
    problems = all_problems()
    for problem in problems:
        print(problem)
    if not problems:
        print(f'model index OK: {len(released_weights(index=ROOT / "model-index.yml"))} records')
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
