"""How exact QuadTree can be: the same model, weights and image, run with 1
and with 2 threads (only the float summation order changes), and the share of
the difference that comes from top-k selections flipping between near-equal
scores (docs/backbones.md, "How exact QuadTree is").

    python .dev_scripts/op_benchmarks/quadtree_exactness.py QuadTree:b2 --shape 800 1344

Prints the largest deviation between the two runs (relative to each output
map's scale), how many top-k rows selected other keys, and the deviation
once the 2-thread run is pinned to the 1-thread run's selections
(``vattn_mm.ops.quadtree``): what is left is rounding.
"""
from __future__ import annotations

import argparse

import torch

from vattn_mm.analysis import build_spec
from vattn_mm.ops.quadtree import pin_selections, record_selections


def _deviation(outputs: list, reference: list) -> float:
    return max(float((a - b).abs().max() / b.abs().max()) for a, b in zip(outputs, reference))


def thread_sensitivity(spec: str, shape: tuple[int, int], seed: int = 0) -> dict:
    """1 vs 2 threads for ``spec`` (random weights after ``manual_seed(seed)``,
    eval) on one random image of ``shape``; restores the thread count."""
    threads = torch.get_num_threads()
    torch.manual_seed(seed)
    model = build_spec(spec).eval()
    image = torch.randn(1, 3, *shape)

    def run(num_threads: int, context) -> list:
        torch.set_num_threads(num_threads)
        with torch.no_grad(), context:
            return [out.clone() for out in model(image)]
    try:
        one, two = record_selections(), record_selections()
        out_one, out_two = run(1, one), run(2, two)
        flipped = sum(int((a.sort(-1).values != b.sort(-1).values).any(-1).sum())
                      for a, b in zip(one.indices, two.indices))
        pinned = pin_selections(one.indices)
        out_pinned = run(2, pinned)
    finally:
        torch.set_num_threads(threads)
    return dict(spec=spec, shape=tuple(shape),
                rows=sum(i.shape[:-1].numel() for i in one.indices), flipped_rows=flipped,
                deviation=_deviation(out_two, out_one),
                pinned_deviation=_deviation(out_pinned, out_one),
                pinned_gap=max((c.max_gap for c in pinned.checks), default=0.0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('spec', nargs='?', default='QuadTree:b2', help="'QuadTree:<arch>'")
    parser.add_argument('--shape', type=int, nargs=2, default=(800, 1344), metavar=('H', 'W'))
    parser.add_argument('--seed', type=int, default=0)
    args = parser.parse_args()
    r = thread_sensitivity(args.spec, tuple(args.shape), args.seed)
    print(f"{r['spec']} {r['shape'][0]}x{r['shape'][1]}: 1 vs 2 threads differ by "
          f"{r['deviation']:.1e}; {r['flipped_rows']} of {r['rows']} top-k rows select other "
          f"keys; pinned to the same selections: {r['pinned_deviation']:.1e} (the pinned "
          f"keys are within {r['pinned_gap']:.1e} of the own top-k scores)")


if __name__ == '__main__':
    main()
