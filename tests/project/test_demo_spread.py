"""`.dev_scripts/demo_spread.py`, the measurement behind the demo configs'
``expected_metrics``: its environments, its reuse of finished runs and its
table (the runs themselves take minutes each and are not repeated here)."""
import json
import os

from ..tools import DEV_SCRIPTS, load_tool

spread = load_tool('demo_spread.py', DEV_SCRIPTS)


def test_each_combination_sets_its_threads_and_instruction_set():
    env = spread.run_env(1, 'avx2')
    assert env['OMP_NUM_THREADS'] == env['MKL_NUM_THREADS'] == '1'
    assert (env['ATEN_CPU_CAPABILITY'], env['ONEDNN_MAX_CPU_ISA'],
            env['MKL_ENABLE_INSTRUCTIONS']) == ('avx2', 'AVX2', 'AVX2')
    native = spread.run_env(2, 'native')
    assert native['OMP_NUM_THREADS'] == '2'
    assert native.get('ATEN_CPU_CAPABILITY') == os.environ.get('ATEN_CPU_CAPABILITY')


def test_a_finished_run_is_read_not_repeated(tmp_path):
    config = 'configs/demo/pvtv2_b0_upernet_demo.py'
    work = tmp_path / spread.run_name(config, 3, 1, 'avx2')
    work.mkdir()
    (work / 'test_metrics.json').write_text(json.dumps({'mIoU': 61.5}))
    (tmp_path / 'unrelated').mkdir()
    (tmp_path / 'unrelated' / 'test_metrics.json').write_text('{}')
    assert spread.train_and_test(config, 3, 1, 'avx2', out=tmp_path) == {'mIoU': 61.5}
    assert spread.finished_runs(tmp_path) == {(config, 3, 1, 'avx2'): {'mIoU': 61.5}}


def test_the_table_gives_each_metrics_range_per_config():
    upernet, maskrcnn = 'configs/demo/u.py', 'configs/demo/m.py'
    table = spread.spread_table({
        (upernet, 0, 2, 'native'): {'mIoU': 63.32, 'aAcc': 96.0},
        (upernet, 0, 2, 'avx2'): {'mIoU': 60.24},
        (upernet, 1, 2, 'native'): {'mIoU': 65.62},
        (maskrcnn, 0, 2, 'native'): {'coco/bbox_mAP': 0.651, 'coco/segm_mAP': 0.71},
    })
    assert '| u | 0 | 2 | avx2 | mIoU | 60.240 |' in table
    assert '| u | mIoU | 3 | 60.240 | 65.620 | 5.380 |' in table
    assert '| m | coco/bbox_mAP | 1 | 0.651 | 0.651 | 0.000 |' in table
    assert 'aAcc' not in table
