"""How far the demo's metrics move with the seed, the thread count and the
CPU's instruction set: trains and evaluates each demo config once per
combination and prints a table of the metrics with their range.

    .venv/bin/python .dev_scripts/demo_spread.py --seeds 0 1 2 --threads 2 --isa native avx2

``--isa avx2`` caps ATen's kernels (``ATEN_CPU_CAPABILITY``), oneDNN
(``ONEDNN_MAX_CPU_ISA``) and MKL (``MKL_ENABLE_INSTRUCTIONS``) at AVX2, as on
a CPU without AVX-512. Runs go to ``work_dirs/demo_spread/``; a finished run
(its ``test_metrics.json`` exists) is not repeated; ``--report`` prints the
table of every finished run there.
"""
import argparse
import itertools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = ('configs/demo/pvtv2_b0_maskrcnn_demo.py', 'configs/demo/pvtv2_b0_upernet_demo.py')
METRICS = ('coco/bbox_mAP', 'coco/segm_mAP', 'mIoU')
ISA_ENV = {
    'native': {},
    'avx2': {'ATEN_CPU_CAPABILITY': 'avx2', 'ONEDNN_MAX_CPU_ISA': 'AVX2',
             'MKL_ENABLE_INSTRUCTIONS': 'AVX2'},
}


def run_name(config: str, seed: int, threads: int, isa: str) -> str:
    return f'{Path(config).stem}-seed{seed}-threads{threads}-{isa}'


def finished_runs(out: Path) -> dict:
    """The metrics of every finished run under ``out``, keyed as
    :func:`spread_table` takes them."""
    results = {}
    for metrics in sorted(out.glob('*/test_metrics.json')):
        found = re.fullmatch(r'(.+)-seed(\d+)-threads(\d+)-(\w+)', metrics.parent.name)
        if found:
            config = f'configs/demo/{found.group(1)}.py'
            key = (config, int(found.group(2)), int(found.group(3)), found.group(4))
            results[key] = json.loads(metrics.read_text())
    return results


def run_env(threads: int, isa: str) -> dict:
    env = dict(os.environ, **ISA_ENV[isa])
    for key in ('OMP_NUM_THREADS', 'MKL_NUM_THREADS', 'OPENBLAS_NUM_THREADS'):
        env[key] = str(threads)
    return env


def train_and_test(config: str, seed: int, threads: int, isa: str, out: Path) -> dict:
    work = out / run_name(config, seed, threads, isa)
    metrics_file = work / 'test_metrics.json'
    if not metrics_file.is_file():
        env = run_env(threads, isa)
        common = ['--work-dir', str(work), '--cfg-options', f'randomness.seed={seed}']
        subprocess.run([sys.executable, 'tools/train.py', config] + common, cwd=ROOT, env=env,
                       check=True)
        checkpoint = (work / 'last_checkpoint').read_text().strip()
        subprocess.run([sys.executable, 'tools/test.py', config, checkpoint] + common, cwd=ROOT,
                       env=env, check=True)
    return json.loads(metrics_file.read_text())


def spread_table(results: dict) -> str:
    """``results`` maps (config, seed, threads, isa) to a metrics dict; one
    row per run, then each metric's minimum, maximum and range per config."""
    lines = ['| config | seed | threads | ISA | metric | value |', '|---|---|---|---|---|---|']
    ranges = {}
    for (config, seed, threads, isa), metrics in sorted(results.items()):
        for key in METRICS:
            if key in metrics:
                value = float(metrics[key])
                lines.append(f'| {Path(config).stem} | {seed} | {threads} | {isa} | {key} | '
                             f'{value:.3f} |')
                ranges.setdefault((Path(config).stem, key), []).append(value)
    lines += ['', '| config | metric | runs | min | max | range |', '|---|---|---|---|---|---|']
    for (name, key), values in sorted(ranges.items()):
        lines.append(f'| {name} | {key} | {len(values)} | {min(values):.3f} | {max(values):.3f} | '
                     f'{max(values) - min(values):.3f} |')
    return '\n'.join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument('--configs', nargs='+', default=list(CONFIGS))
    parser.add_argument('--seeds', nargs='+', type=int, default=[0, 1, 2])
    parser.add_argument('--threads', nargs='+', type=int, default=[2])
    parser.add_argument('--isa', nargs='+', choices=sorted(ISA_ENV), default=['native'])
    parser.add_argument('--out', type=Path, default=ROOT / 'work_dirs' / 'demo_spread')
    parser.add_argument('--report', action='store_true',
                        help='train nothing: the table of every finished run under --out')
    args = parser.parse_args()
    if args.report:
        print(spread_table(finished_runs(args.out)))
        return
    subprocess.run([sys.executable, 'tools/make_demo_data.py', '--root', 'data/demo'], cwd=ROOT,
                   check=True)
    results = {}
    for combo in itertools.product(args.configs, args.seeds, args.threads, args.isa):
        results[combo] = train_and_test(*combo, out=args.out)
        print(spread_table(results), flush=True)
    table = spread_table(results)
    (args.out / 'spread.md').write_text(table + '\n')
    print(table)


if __name__ == '__main__':
    main()
