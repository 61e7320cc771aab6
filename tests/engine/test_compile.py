"""``torch.compile``: no graph breaks in any backbone family or token mixer
(forward in eval and train mode, traced by ``torch._dynamo.explain``), the
breaks the report finds name the line that causes them, an inductor-compiled
tiny backbone equals eager in its outputs and gradients, a demo trains with
its backbone compiled (``CompileModulesHook``) and, ``extended``, another with
mmengine's ``compile`` setting."""
import os.path as osp
import sys

import pytest
import torch
from torch import nn

from ..backbone_cases import CASES, REGISTERED, build_micro
from ..layers.position_contract import build_covering, covering_pyramids
from vattn_mm.analysis import compile_report
from vattn_mm.backbones import TokenPyramid
from vattn_mm.engine import CompileModulesHook
from vattn_mm.layers import MIXERS

#: slow (inductor compiles whole models and train steps)
pytestmark = pytest.mark.slow

#: one block per stage: the mixer is in every stage, the trace stays short
MIXER_MICRO = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
                   depths=[1, 1, 1, 1])
#: the token mixers in each backbone's micro model (its test checks the list): the
#: backbone's trace covers them in ``make test``, their own TokenPyramid is ``extended``
BACKBONE_MIXERS = {
    'AgentPVT': {'AgentAttention'},
    'DilateFormer': {'GlobalSelfAttention', 'MultiScaleDilatedAttention'},
    'EfficientViT': {'LiteMLA'},
    'FocalNet': {'FocalModulation'},
    'LITv2': {'HiLoAttention'},
    'P2T': {'PyramidPoolingAttention'},
    'PVTv2': {'SpatialReductionAttention'},
    'QuadTree': {'QuadtreeAttention'},
    'TokenPyramid': {'FocalModulation', 'HiLoAttention', 'PyramidPoolingAttention',
                     'SpatialReductionAttention'},
}
IN_A_BACKBONE = set().union(*BACKBONE_MIXERS.values())
MIXER_CASES = [pytest.param(m, marks=pytest.mark.extended) if m in IN_A_BACKBONE else m
               for m in sorted(MIXERS)]


def assert_no_breaks(model: nn.Module, x: torch.Tensor) -> None:
    for train in (False, True):
        model.train(train)
        with torch.set_grad_enabled(train):
            report = compile_report(model, x)
        assert not report.breaks and report.graphs == 1, \
            f'{"train" if train else "eval"}: {report.format()}'


@pytest.mark.parametrize('name', REGISTERED)
def test_no_graph_breaks_in_any_backbone(name):
    model = build_micro(name)
    mixer_names = {cls: mixer for mixer, cls in MIXERS.items()}
    assert {mixer_names[type(m)] for m in model.modules() if type(m) in mixer_names} == \
        BACKBONE_MIXERS[name]
    assert_no_breaks(model, torch.randn(1, 3, *CASES[name].micro_size))


@pytest.mark.parametrize('mixer', MIXER_CASES)
def test_no_graph_breaks_with_any_mixer(mixer):
    model = TokenPyramid(MIXER_MICRO, mixer=dict(type=mixer), drop_path_rate=0.1)
    model.init_weights()
    assert_no_breaks(model, torch.randn(1, 3, 64, 64))


POSITION_PYRAMIDS = covering_pyramids()


@pytest.mark.parametrize('options', list(POSITION_PYRAMIDS.values()), ids=list(POSITION_PYRAMIDS))
def test_no_graph_breaks_with_position_modules_and_tokenisers(options):
    """Every position module, mixer position variant and tokeniser (the
    pyramids of ``tests/layers/position_contract.py`` that hold them all)."""
    assert_no_breaks(build_covering(options), torch.randn(1, 3, 64, 64))


class DataDependentBranch(nn.Module):
    def forward(self, x):
        if x.sum().item() > 0:      # Python branch on a tensor value: a graph break
            return x * 2
        return x - 1


def test_report_names_the_breaking_line():
    here = osp.dirname(osp.abspath(__file__))
    report = compile_report(DataDependentBranch(), torch.ones(3), roots=[here])
    assert report.graphs == 2 and len(report.breaks) == 1, report.format()
    brk = report.breaks[0]
    assert brk.ours == f'engine/test_compile.py:{DataDependentBranch.forward.__code__.co_firstlineno + 1}'
    assert 'item' in brk.reason.lower() or 'data-dependent' in brk.reason.lower(), brk.reason
    assert brk.ours in report.format()
    assert not compile_report(DataDependentBranch(), torch.ones(3)).ours   # not in vattn_mm


def test_inductor_matches_eager_forward_and_gradients():
    """The PVTv2 micro (spatial-reduction attention, depthwise-conv FFN; the
    smallest graph: inductor's C++ builds take minutes on 2 cores): outputs
    and every gradient to 1e-4."""
    torch.manual_seed(0)
    model = build_micro('PVTv2').train()
    x = torch.randn(2, 3, 64, 64)
    eager_out = model(x)
    sum(o.square().mean() for o in eager_out).backward()
    eager_grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    model.zero_grad(set_to_none=True)
    torch._dynamo.reset()
    compiled_out = torch.compile(model)(x)
    sum(o.square().mean() for o in compiled_out).backward()
    for e, c in zip(eager_out, compiled_out):
        torch.testing.assert_close(c, e, atol=1e-4, rtol=1e-4)
    for key, p in model.named_parameters():
        torch.testing.assert_close(p.grad, eager_grads[key], atol=1e-4, rtol=1e-4, msg=key)


def test_capture_skips_the_eager_chunk_loops():
    """Under torch.compile an inference FFN runs whole (one fc1 / fc2 pair in
    the graph, not one per chunk) and gives the chunked eager result."""
    from vattn_mm.layers import MLP
    from vattn_mm.ops.autograd import is_capturing
    assert not is_capturing()
    assert torch.compile(lambda x: x + 1 if is_capturing() else x - 1,
                         backend='eager', fullgraph=True)(torch.zeros(1)).item() == 1
    mlp, whole = MLP(8, 16, chunk_tokens=4).eval(), MLP(8, 16, chunk_tokens=None).eval()
    x = torch.randn(1, 32, 8)
    with torch.no_grad():
        chunked_ops = torch._dynamo.explain(mlp)(x).op_count
        assert chunked_ops == torch._dynamo.explain(whole)(x).op_count
        torch.testing.assert_close(torch.compile(mlp, backend='eager')(x), mlp(x))


def test_compile_hook_errors_name_the_problem():
    with pytest.raises(ValueError, match='submodule paths'):
        CompileModulesHook(modules=[])

    class Runner:
        model = nn.Sequential(nn.Linear(2, 2))
    with pytest.raises(AttributeError, match="Sequential has no submodule 'backbone'"):
        CompileModulesHook().before_run(Runner())


def test_demo_maskrcnn_trains_with_the_backbone_compiled(demo_data, tmp_path):
    """tools/train.py on the PVTv2-b0 Mask R-CNN demo with CompileModulesHook:
    two iterations and a validation with the backbone compiled, forward and
    backward (dynamo + AOTAutograd; the ``aot_eager`` backend skips inductor's
    C++ code generation, which the test above covers), and the checkpoint's
    keys those of the plain model."""
    from mmengine.config import Config

    from .test_training import DET_DEMO, ROOT, data_options, run_tool
    cfg = Config.fromfile(ROOT / DET_DEMO)
    cfg.custom_hooks = [*cfg.get('custom_hooks', []),
                        dict(type='CompileModulesHook', backend='aot_eager')]
    config = tmp_path / 'compiled_demo.py'
    cfg.dump(config)
    opts = data_options(demo_data, DET_DEMO) + [
        'train_cfg.max_iters=2', 'train_cfg.val_interval=2', 'default_hooks.checkpoint.interval=2',
        'train_dataloader.batch_size=2', 'train_dataloader.num_workers=0',
        'train_dataloader.persistent_workers=False', 'val_dataloader.num_workers=0',
        'val_dataloader.persistent_workers=False']
    proc = run_tool([sys.executable, 'tools/train.py', str(config), '--work-dir',
                     str(tmp_path / 'run'), '--cfg-options', *opts], timeout=1200)
    assert "CompileModulesHook: torch.compile({'backend': 'aot_eager'}) of backbone" in \
        proc.stdout + proc.stderr
    ckpt = torch.load(tmp_path / 'run' / 'iter_2.pth', weights_only=True)
    keys = list(ckpt['state_dict'])
    assert any(k.startswith('backbone.') for k in keys)
    assert not any('_orig_mod' in k for k in keys)


@pytest.mark.extended   # the second compiled demo training (the Mask R-CNN one: make test)
def test_demo_upernet_trains_with_the_runners_compile(demo_data, tmp_path):
    """mmengine's own ``compile`` setting (the runner compiles the model's
    whole ``train_step``) on the PVTv2-b0 UperNet demo: a training iteration,
    a validation with a finite mIoU, and a checkpoint with the plain model's
    keys.  The ``aot_eager`` backend (dynamo + AOTAutograd over the whole
    step) skips inductor's C++ code generation, which
    test_inductor_matches_eager_forward_and_gradients covers and which takes
    two minutes here on 2 cores.  One iteration: a second one retraces
    (mmseg's data preprocessor's graph guards on the identity of each
    sample's path string).  SGD instead of the demo's AdamW: the optimizer
    step is torch's, not the model's."""
    from .test_training import ROOT, SEG_DEMO, data_options, run_tool
    opts = data_options(demo_data, SEG_DEMO) + [
        'compile.backend=aot_eager', 'optim_wrapper.optimizer.type=SGD', 'optim_wrapper.optimizer.lr=0.01',
        'train_cfg.max_iters=1', 'train_cfg.val_interval=1',
        'default_hooks.checkpoint.interval=1', 'train_dataloader.batch_size=2',
        'train_dataloader.num_workers=0', 'train_dataloader.persistent_workers=False',
        'val_dataloader.num_workers=0', 'val_dataloader.persistent_workers=False']
    proc = run_tool([sys.executable, 'tools/train.py', str(ROOT / SEG_DEMO), '--work-dir',
                     str(tmp_path / 'run'), '--cfg-options', *opts], timeout=1800)
    log = proc.stdout + proc.stderr
    assert 'Model has been "compiled"' in log
    assert 'mIoU' in log
    ckpt = torch.load(tmp_path / 'run' / 'iter_1.pth', weights_only=True)
    keys = list(ckpt['state_dict'])
    assert any(k.startswith('backbone.') for k in keys)
    assert not any('_orig_mod' in k for k in keys)
