"""Write the embedded demo dataset (COCO instances + ADE20K-style semantic maps).

    python tools/make_demo_data.py [--root data/demo] [--num-train 96] [--num-val 24]
"""
import argparse

from vattn_mm.datasets import make_demo_dataset


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--root', default='data/demo')
    parser.add_argument('--num-train', type=int, default=96)
    parser.add_argument('--num-val', type=int, default=24)
    parser.add_argument('--size', type=int, default=256)
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    root = make_demo_dataset(args.root, args.num_train, args.num_val, args.size, seed=args.seed)
    print(f'demo dataset written to {root}')


if __name__ == '__main__':
    main()
