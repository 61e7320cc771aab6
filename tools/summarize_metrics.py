"""Print the test metrics of one or more work dirs as a markdown table, with
the range a config declares for them (``expected_metrics``: what `make demo`
gives across seeds and CPUs), and say where the visualised predictions are.

    python tools/summarize_metrics.py work_dirs/A work_dirs/B
"""
import argparse
import json
from pathlib import Path

KEYS = ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50',
        'mIoU', 'aAcc', 'mAcc', 'accuracy/top1')


def expected_ranges(work: Path) -> dict:
    """``expected_metrics`` of the config tools/test.py wrote into ``work``."""
    dumped = sorted(work.glob('*.py'))
    if not dumped:
        return {}
    from mmengine.config import Config
    return dict(Config.fromfile(str(dumped[0])).get('expected_metrics') or {})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='+')
    args = parser.parse_args()
    rows, outside, declared = [], [], False
    print('\n| run | metric | value | expected |\n|---|---|---|---|')
    for work in map(Path, args.work_dirs):
        metrics_file = work / 'test_metrics.json'
        if not metrics_file.is_file():
            raise FileNotFoundError(f'{metrics_file} not found: run tools/test.py first')
        metrics, expected = json.loads(metrics_file.read_text()), expected_ranges(work)
        declared = declared or bool(expected)
        for key in KEYS:
            if key in metrics:
                low, high = expected.get(key, (None, None))
                span = f'{low:.3f}-{high:.3f}' if low is not None else ''
                print(f'| {work.name} | {key} | {metrics[key]:.3f} | {span} |')
                if low is not None and not low <= metrics[key] <= high:
                    outside.append(f'{work.name} {key}')
        pictures = sorted(p for p in (work / 'vis').rglob('*') if p.suffix in ('.jpg', '.png'))
        rows.append((work.name, len(pictures), work / 'vis'))
    for name, count, vis in rows:
        print(f'{name}: {count} pictures of the predictions under {vis}')
    if outside:
        print(f'outside the expected range: {", ".join(outside)}')
    elif declared:
        print('every metric within its expected range')


if __name__ == '__main__':
    main()
