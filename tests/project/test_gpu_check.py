""".dev_scripts/run_gpu_check.py on the CPU (``--device cpu --quick``): the
JSON and markdown report, a broken golden fixture and a NaN backbone reported
as failed with a non-zero exit, the time budget, the Mask R-CNN loss verdict
on the session's demo run, and clear errors."""
import json
import math
import shutil

import pytest
import torch

from ..golden import GOLDEN, load_fixture
from ..engine.test_training import DET_DEMO
from ..tools import DEV_SCRIPTS, dev_package, load_tool

gpu_check = dev_package('gpu_check')

#: slow (the acceptance script runs its checks and trains the demo)
pytestmark = pytest.mark.slow

SECTIONS = ['golden_backbones', 'golden_mixers', 'autocast_backbones', 'autocast_mixers',
            'training_steps', 'fast_paths', 'cuda_tests', 'maskrcnn_demo']


@pytest.fixture(scope='module')
def tool():
    return load_tool('run_gpu_check.py', DEV_SCRIPTS)


@pytest.fixture(scope='module')
def quick_run(tool, tmp_path_factory):
    out = tmp_path_factory.mktemp('gpu_check')
    code = tool.main(['--device', 'cpu', '--quick', '--out', str(out)])
    report = json.loads((out / 'gpu_check.json').read_text())
    return code, report, (out / 'gpu_check.md').read_text()


def checks(report: dict, section: str) -> dict:
    (entry, ) = [s for s in report['sections'] if s['name'] == section]
    return {c['name']: c for c in entry['checks']}


def test_quick_cpu_run_writes_the_report(quick_run):
    code, report, markdown = quick_run
    assert code == 0, [c for s in report['sections'] for c in s['checks']
                       if c['status'] == 'failed']
    assert [s['name'] for s in report['sections']] == SECTIONS
    assert report['device'] == 'cpu' and report['quick'] and report['counts']['failed'] == 0
    assert all(c['status'] == 'passed' for name in SECTIONS[:5]
               for c in checks(report, name).values())
    # every registered mixer under float16 autocast, LiteMLA also amplified
    mixers = checks(report, 'autocast_mixers')
    assert set(gpu_check.MIXERS) | {f'LiteMLA x{gpu_check.LITE_MLA_STRESS:g}'} == set(mixers)
    assert all(c['metrics']['max |mixer out|'] > 0 for c in mixers.values())
    autocast = checks(report, 'autocast_backbones')['PVTv2:b0']['metrics']
    assert autocast['float16 out'] <= gpu_check.OUTPUT_REL_TOL[torch.float16]
    step = checks(report, 'training_steps')['PVTv2:b0 64x64 amp']['metrics']
    assert step['step ms'] > 0 and 'peak MiB' not in step        # no CUDA memory on the CPU
    # timm's PVTv2-b2 with our weights beside ours (the full run adds FocalNet-T, both sizes, AMP)
    assert checks(report, 'training_steps')['timm/PVTv2:b2 64x64 fp32']['metrics']['step ms'] > 0
    # every path PVTv2-b0 holds, on vs off where it acts, float32 and AMP
    fast = checks(report, 'fast_paths')
    held = gpu_check.fast_path_holders({'PVTv2': 'b0'})
    assert set(fast) == {f'{name} {mode} 64x64 {precision}' for name in held
                         for mode in gpu_check.FAST_PATHS[name].modes
                         for precision in ('fp32', 'amp')}
    for name, check in fast.items():
        assert check['status'] == 'passed', check
        metrics = check['metrics']
        assert metrics['on ms'] > 0 and metrics['off ms'] > 0 and 'on MiB' not in metrics
        assert metrics['verdict'] in ('on', 'off') and metrics['backbone'] == 'PVTv2:b0'
        assert ('on vs off err' in metrics) == name.endswith('fp32')
    assert 'Implied defaults on cpu: `depthwise_weight_grad` ' in markdown
    assert checks(report, 'cuda_tests')
    assert all(c['status'] == 'skipped' for s in SECTIONS[-2:] for c in checks(report, s).values())
    assert '## Golden fixtures: backbones (float32)' in markdown
    assert '| PVTv2:b0 | passed |' in markdown


def test_broken_fixture_and_nan_backbone_fail_the_run(tool, tmp_path, monkeypatch):
    golden = tmp_path / 'golden'
    (golden / 'pvtv2').mkdir(parents=True)
    shutil.copytree(GOLDEN / 'mixers', golden / 'mixers')
    rec = load_fixture(GOLDEN / 'pvtv2' / 'micro_sr.pt')
    rec['outputs'][2] = rec['outputs'][2] + 0.01
    torch.save(rec, golden / 'pvtv2' / 'micro_sr.pt')
    shutil.copy(GOLDEN / 'pvtv2' / 'micro_li.pt', golden / 'pvtv2')
    build = gpu_check.build_backbone

    def nan_backbone(*args, **kwargs):
        model = build(*args, **kwargs)
        model.register_forward_hook(lambda m, i, outs: [o * float('nan') for o in outs])
        return model
    monkeypatch.setattr(gpu_check, 'build_backbone', nan_backbone)
    out = tmp_path / 'out'
    code = tool.main(['--device', 'cpu', '--quick', '--out', str(out), '--golden', str(golden)])
    report = json.loads((out / 'gpu_check.json').read_text())
    assert code == 1
    golden_checks = checks(report, 'golden_backbones')
    assert golden_checks['pvtv2/micro_li']['status'] == 'passed'
    assert golden_checks['pvtv2/micro_sr']['status'] == 'failed'
    assert 'output err' not in golden_checks['pvtv2/micro_sr']['metrics']
    assert 'scaled error' in golden_checks['pvtv2/micro_sr']['detail']
    assert 'non-finite' in checks(report, 'autocast_backbones')['PVTv2:b0']['detail']
    steps = checks(report, 'training_steps')
    assert steps.pop('timm/PVTv2:b2 64x64 fp32')['status'] == 'passed'     # timm's own model
    assert steps and all(c['status'] == 'failed' for c in steps.values())
    assert all(c['status'] == 'passed' for c in checks(report, 'autocast_mixers').values())
    # NaN outputs on and off: the float32 rows' agreement fails, AMP rows compare no values
    fast = checks(report, 'fast_paths')
    fp32 = [c for name, c in fast.items() if name.endswith('fp32')]
    assert fp32 and all(c['status'] == 'failed' and 'on vs off' in c['detail'] for c in fp32)
    assert all(c['status'] == 'passed' for name, c in fast.items() if name.endswith('amp'))
    assert report['counts']['failed'] == 1 + 1 + 2 + len(fp32)
    assert '| pvtv2/micro_sr | failed |' in (out / 'gpu_check.md').read_text()


def test_time_budget_skips_instead_of_overrunning(tmp_path):
    report = gpu_check.run_checks(tmp_path, device='cpu', quick=True, budget_s=1e-9, golden=GOLDEN)
    statuses = {c.status for s in report.sections for c in s.checks}
    assert statuses == {'skipped'} and not report.failed()
    assert 'time budget' in report.sections[0].checks[0].detail
    assert (tmp_path / 'gpu_check.md').is_file()


def test_full_run_measures_every_fast_path():
    """The full run finds a backbone holding each registered path among the
    ones it builds, so every path gets its on / off rows on the GPU."""
    holders = gpu_check.fast_path_holders(gpu_check.full_size_archs())
    assert set(holders) == set(gpu_check.FAST_PATHS)
    assert holders['quadtree_chunks'] == ('QuadTree', 'b2')
    assert holders['focal_recompute'] == ('FocalNet', 'tiny_srf')
    # and times timm's PVTv2-b2 and FocalNet-T beside ours
    assert [peer for family, arch in gpu_check.full_size_archs(timed=True).items()
            for peer in gpu_check.peers_of(f'{family}:{arch}', ('timm', ))] == [
        'timm/PVTv2:b2', 'timm/FocalNet:tiny_srf']


def test_fast_path_verdicts_and_implied_defaults():
    verdict = gpu_check.fast_path_verdict
    assert verdict(0.9, None) == verdict(0.95, 1.2) == 'on'                  # faster
    assert verdict(1.04, 0.85) == 'on'                              # leaner at the same speed
    assert verdict(1.1, 0.5) == verdict(1.0, 0.95) == verdict(0.99, None) == 'off'
    Check = gpu_check.Check

    def row(name, status='passed', verdict='on'):
        return Check(name, status, metrics={'verdict': verdict} if status == 'passed' else {})
    defaults = gpu_check.implied_defaults([
        row('a train 512x512 fp32'), row('a train 512x512 amp'),
        row('b train 512x512 fp32'), row('b train 512x512 amp', verdict='off'),
        row('c inference 512x512 fp32'), row('c inference 512x512 amp', status='failed'),
        row('d train 512x512 fp32', status='skipped'), row('e train 512x512 fp32'),
        row('e train 800x1344 fp32', status='skipped')])
    assert defaults == {'a': 'on', 'b': 'off', 'c': 'off', 'd': 'no data', 'e': 'on'}


def test_demo_loss_verdict_on_the_sessions_demo_run(demo_trained):
    losses = gpu_check.read_losses(demo_trained(DET_DEMO))
    assert len(losses) == 2
    assert gpu_check.demo_loss_verdict(losses)['iterations'] == 2
    with pytest.raises(AssertionError, match='non-finite'):
        gpu_check.demo_loss_verdict(losses + [float('nan')])
    with pytest.raises(AssertionError, match='more than 2x apart'):
        gpu_check.demo_loss_verdict([10 * v for v in losses])
    with pytest.raises(AssertionError, match='did not fall'):
        gpu_check.demo_loss_verdict(losses[:1] * 20)


def test_bad_arguments_are_clear_errors(tool, tmp_path):
    with pytest.raises(FileNotFoundError, match='golden fixture folder not found'):
        gpu_check.run_checks(tmp_path, device='cpu', golden=tmp_path / 'nowhere')
    if not torch.cuda.is_available():
        with pytest.raises(RuntimeError, match='torch sees no GPU'):
            gpu_check.run_checks(tmp_path, device='cuda')
    with pytest.raises(SystemExit):
        tool.parse_args(['--out', str(tmp_path), '--maskrcnn-iters', '-1'])
    assert not list(tmp_path.iterdir())       # nothing written


def test_golden_input_gradients_where_a_fixture_has_them(tmp_path):
    """No fixture carries ``grad_weights`` yet: one made from our own run
    checks the path, and a wrong ``grad_input`` fails it."""
    rec = load_fixture(GOLDEN / 'pvtv2' / 'micro_li.pt')
    model = gpu_check.golden_backbone(rec, tmp_path)
    x = rec['input'].clone().requires_grad_()
    weights = [torch.randn_like(o) for o in rec['outputs']]
    sum((o * w).sum() for o, w in zip(model(x), weights)).backward()
    rec.update(grad_weights=weights, grad_input=x.grad)
    torch.save(rec, tmp_path / 'with_grad.pt')
    metrics = gpu_check.check_golden_backbone(tmp_path / 'with_grad.pt', torch.device('cpu'))
    assert metrics['grad err'] < 1e-6
    rec['grad_input'] = x.grad * 1.01
    torch.save(rec, tmp_path / 'wrong_grad.pt')
    with pytest.raises(AssertionError, match='grad: scaled error'):
        gpu_check.check_golden_backbone(tmp_path / 'wrong_grad.pt', torch.device('cpu'))


def test_golden_gradients_against_the_cpu():
    """Off the CPU, every golden case compares the input's and each
    parameter's gradient with the CPU's (here CPU against CPU: identical)."""
    path = GOLDEN / 'pvtv2' / 'micro_li.pt'
    assert gpu_check.check_golden_backbone(path, torch.device('cpu'), grads_vs_cpu=True) == {
        'output err': pytest.approx(0, abs=1e-5), 'grad vs cpu err': 0.}
    assert 'grad vs cpu err' not in gpu_check.check_golden_backbone(path, torch.device('cpu'))
    mixer = gpu_check.check_golden_mixer(GOLDEN / 'mixers' / 'rest_emsa.pt', torch.device('cpu'),
                                         grads_vs_cpu=True)
    assert mixer['grad vs cpu err'] == 0.


def test_scaled_error_does_not_hide_nan():
    ref = [torch.ones(3), torch.zeros(2)]
    nan = torch.tensor([1., float('nan'), 1.])
    assert math.isnan(gpu_check.max_scaled_error([nan, torch.zeros(2)], ref))
    assert math.isnan(gpu_check.max_scaled_error([torch.ones(3), torch.full((2, ), math.nan)], ref))
    assert gpu_check.max_scaled_error([torch.ones(3) * 1.5, torch.zeros(2)], ref) == 0.5
