"""Print the test metrics of one or more work dirs as a markdown table and
say where the visualised predictions are.

    python tools/summarize_metrics.py work_dirs/A work_dirs/B
"""
import argparse
import json
from pathlib import Path

KEYS = ('coco/bbox_mAP', 'coco/bbox_mAP_50', 'coco/segm_mAP', 'coco/segm_mAP_50',
        'mIoU', 'aAcc', 'mAcc', 'accuracy/top1')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('work_dirs', nargs='+')
    args = parser.parse_args()
    rows = []
    for work in map(Path, args.work_dirs):
        metrics_file = work / 'test_metrics.json'
        if not metrics_file.is_file():
            raise FileNotFoundError(f'{metrics_file} not found: run tools/test.py first')
        metrics = json.loads(metrics_file.read_text())
        pictures = sorted(p for p in (work / 'vis').rglob('*') if p.suffix in ('.jpg', '.png'))
        rows.append((work.name, metrics, len(pictures), work / 'vis'))
    print('\n| run | metric | value |\n|---|---|---|')
    for name, metrics, _, _ in rows:
        for key in KEYS:
            if key in metrics:
                print(f'| {name} | {key} | {metrics[key]:.3f} |')
    for name, _, count, vis in rows:
        print(f'{name}: {count} pictures of the predictions under {vis}')


if __name__ == '__main__':
    main()
