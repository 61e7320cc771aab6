"""ONNX export (``vattn_mm/deploy/``, ``tools/deploy/export_onnx.py``):
every family and every token mixer exported once with dynamic height and
width and checked in onnxruntime at three sizes, one of them not a multiple
of 32 (the padding path), to 1e-4 relative error; QuadTree's top-k selection
checked by pinning PyTorch to onnxruntime's selection (near-ties only); the
export-only layer paths equal to the normal ones; the clear error for an
operator without ONNX form."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from vattn_mm.backbones import TokenPyramid
from vattn_mm.deploy import OnnxExportError, OnnxModel, check_onnx, export_onnx, format_checks
from vattn_mm.layers import MIXERS, coarse_to_fine_attention
from vattn_mm.ops.quadtree import pin_selections, record_selections, selecting
from vattn_mm.ops import export_paths, is_exporting

from ..backbone_cases import CASES, build_micro
from ..layers.position_contract import build_covering, covering_pyramids
from ..tools import load_tool as load_script

pytest.importorskip('onnxruntime')

ROOT = Path(__file__).resolve().parents[2]
EXPORT_SIZE = (64, 64)
#: the export size, another aspect ratio, and sides that are not multiples of 32
CHECK_SIZES = ((64, 64), (96, 128), (77, 61))
RTOL = 1e-4
#: QuadTree top-2 at every level: a real selection even at 64x64
TOP2 = [2, 2, 2, 2]
TINY = dict(embed_dims=[8, 16, 24, 32], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
            depths=[1, 1, 1, 1])


def mixer_pyramid(mixer: str, **mixer_args) -> TokenPyramid:
    model = TokenPyramid(TINY, mixer=dict(type=mixer, **mixer_args), drop_path_rate=0.)
    model.init_weights()
    return model


def assert_exports(model: nn.Module, path: Path, sizes=CHECK_SIZES) -> list:
    names = export_onnx(model, path, EXPORT_SIZE)
    checks = check_onnx(model, path, sizes, rtol=RTOL, export_size=EXPORT_SIZE)
    assert len(checks) == len(sizes) * len(names)
    assert all(c.ok for c in checks), format_checks(checks)
    return checks


@pytest.mark.parametrize('family', sorted(CASES))
def test_family_exports_and_matches(family, tmp_path):
    checks = assert_exports(build_micro(family), tmp_path / f'{family}.onnx')
    assert all((c.selection is not None) == (family == 'QuadTree') for c in checks)


#: every registered mixer at its defaults, PVTv2's linear SRA (pooled), and an
#: inner width other than the stage width (the attention zoo's matching knob)
MIXER_CASES = [(name, {}) for name in sorted(MIXERS)] + [
    ('SpatialReductionAttention', dict(linear=True)),
    ('MultiScaleDilatedAttention', dict(attn_dims=48)),
    ('ShiftedWindowAttention', dict(attn_dims=48)),
    ('HiLoAttention', dict(attn_dims=48)),
    ('FocalModulation', dict(modulation_dims=48))]


@pytest.mark.parametrize('mixer,args', MIXER_CASES,
                         ids=[f'{m}{"-" if a else ""}{"-".join(a)}' for m, a in MIXER_CASES])
def test_mixer_exports_and_matches(mixer, args, tmp_path):
    assert_exports(mixer_pyramid(mixer, **args), tmp_path / f'{mixer}.onnx')


#: pyramids that together hold every position module, mixer position variant and tokeniser
POSITION_PYRAMIDS = covering_pyramids()


@pytest.mark.parametrize('options', list(POSITION_PYRAMIDS.values()), ids=list(POSITION_PYRAMIDS))
def test_position_modules_and_tokenisers_export(options, tmp_path):
    assert_exports(build_covering(options), tmp_path / 'positions.onnx')


def test_chunked_loops_do_not_freeze_the_export_size(tmp_path):
    """The MLP's and dilated attention's inference chunking (Python loops over
    the token count) is off while exporting: exported with the loops active
    at the export size, the file still holds at larger maps."""
    model = build_micro('DilateFormer')
    for module in model.modules():
        if hasattr(module, 'chunk_tokens'):
            module.chunk_tokens = 64
    assert_exports(model, tmp_path / 'chunked.onnx', sizes=((64, 64), (96, 128)))


def test_quadtree_selection_check(tmp_path):
    """QuadTree with a real top-2 selection at every level, checked at the
    three sizes (77x61: zero padding, exact ties): where onnxruntime selects
    other keys than PyTorch, PyTorch pinned to its selection agrees to 1e-4
    and every differing selection is a near-tie; the plain comparison is
    reported where the selections are identical."""
    checks = assert_exports(build_micro('QuadTree', topks=TOP2), tmp_path / 'qt.onnx')
    selections = {c.size: c.selection for c in checks}
    assert set(selections) == set(CHECK_SIZES)
    for s in selections.values():
        assert s.ok and s.rows > 0 and s.calls == 6 and s.max_gap <= 1e-5, s.describe()
        if not s.pinned:   # identical selections: the plain errors
            assert s.max_gap == 0 and s.differing == 0
            assert max(c.rel_error for c in checks if c.size == s.size) == s.unpinned_error
    report = format_checks(checks)
    assert "top-k selections, onnxruntime against PyTorch's own" in report
    for size, s in selections.items():
        assert f'{size[0]}x{size[1]}: ' in report
        assert ("pinned to onnxruntime's selection" in s.describe()) == s.pinned


def shifted_selection(monkeypatch, name: str = 'selection0') -> None:
    """onnxruntime's ``name`` selection replaced by the next key (a wrong,
    not a near-tie, selection: what a broken index computation would give)."""
    call = OnnxModel.__call__

    def wrong(self, x):
        out = call(self, x)
        if name in self.output_names:
            i = self.output_names.index(name)
            out[i] = (out[i] + 1) % out[i].shape[1]   # coarsest level: N queries = N keys
        return out

    monkeypatch.setattr(OnnxModel, '__call__', wrong)


def test_selection_check_fails_on_a_wrong_selection(tmp_path, monkeypatch):
    model = build_micro('QuadTree', topks=TOP2)
    export_onnx(model, tmp_path / 'qt.onnx', EXPORT_SIZE)
    shifted_selection(monkeypatch)
    checks = check_onnx(model, tmp_path / 'qt.onnx', CHECK_SIZES[:1], export_size=EXPORT_SIZE)
    selection = checks[0].selection
    assert not any(c.ok for c in checks) and selection.pinned and not selection.ok
    assert selection.differing > 0 and selection.max_gap > 1e-2
    assert 'not near-ties of the best ones' in format_checks(checks)


def test_selection_check_fails_on_wrong_outputs(tmp_path, monkeypatch):
    """The pinned comparison still sees an error in the graph's arithmetic."""
    model = build_micro('QuadTree', topks=TOP2)
    export_onnx(model, tmp_path / 'qt.onnx', EXPORT_SIZE)
    call = OnnxModel.__call__
    monkeypatch.setattr(OnnxModel, '__call__', lambda self, x: [
        t * 1.001 if name == 'output1' else t
        for name, t in zip(self.output_names, call(self, x))])
    checks = check_onnx(model, tmp_path / 'qt.onnx', CHECK_SIZES, export_size=EXPORT_SIZE)
    assert [c.ok for c in checks if c.output == 'output1'] == [False] * 3
    assert all(c.ok for c in checks if c.output != 'output1')
    assert all(c.selection.ok for c in checks)


@pytest.mark.parametrize('attn_type', ['A', 'B'])
def test_pinning_own_selection_reproduces_pytorch(attn_type):
    """Pinned to its own recorded selection, QuadTree attention gives
    exactly its outputs; one far-from-tie key in one row is reported as such."""
    torch.manual_seed(0)
    sizes = [(2, 3), (4, 6), (8, 12)]
    q, k, v = ([torch.randn(2, h * w, 8) for h, w in sizes] for _ in range(3))
    with torch.no_grad():
        with record_selections() as record:
            expected = coarse_to_fine_attention(q, k, v, sizes, [3, 3, 3], attn_type)
        assert selecting() is False and len(record.indices) == 2
        with pin_selections(record.indices) as pinned:
            got = coarse_to_fine_attention(q, k, v, sizes, [3, 3, 3], attn_type)
        for e, g in zip(expected, got):
            assert torch.equal(e, g)
        assert [(c.differing, c.max_gap) for c in pinned.checks] == [(0, 0.), (0, 0.)]
        # the coarsest level's row 0 keeps its worst key instead of its 3rd best
        scores = q[0] @ k[0].transpose(-1, -2)
        wrong = [t.clone() for t in record.indices]
        wrong[0][0, 0, -1] = scores[0, 0].argmin()
        with pin_selections(wrong) as pinned:
            coarse_to_fine_attention(q, k, v, sizes, [3, 3, 3], attn_type)
    first = pinned.checks[0]
    assert first.differing == 1 and first.rows == 2 * 6
    if attn_type == 'B':   # type A selects on softmax probabilities: another scale
        kth = scores[0, 0].topk(3).values[-1]
        assert first.max_gap == pytest.approx(
            ((kth - scores[0, 0].min()) / scores[0, 0].abs().max()).item(), rel=1e-5)
    assert first.max_gap > 1e-2
    with pytest.raises(ValueError, match='pinned indices of shape'):
        with pin_selections([t[:, :1] for t in record.indices]):
            coarse_to_fine_attention(q, k, v, sizes, [3, 3, 3], attn_type)
    with pytest.raises(ValueError, match='2 pinned selections given, the model made 1'):
        with pin_selections(record.indices):
            coarse_to_fine_attention(q[:2], k[:2], v[:2], sizes[:2], [3, 3], attn_type)


@pytest.mark.parametrize('family', sorted(CASES))
def test_export_paths_equal_normal_paths(family):
    model = build_micro(family).eval()
    x = torch.randn(1, 3, 77, 61)
    with torch.no_grad():
        expected = model(x)
        with export_paths():
            assert is_exporting()
            got = model(x)
    assert not is_exporting()
    for e, g in zip(expected, got):
        torch.testing.assert_close(g, e, rtol=1e-5, atol=1e-5 * e.abs().max().item())


def test_export_restores_model_state(tmp_path):
    model = build_micro('PVTv2').train()
    model.stages[0].eval()
    export_onnx(model, tmp_path / 'm.onnx', (32, 32), dynamic=False)
    assert model.training and not model.stages[0].training and model.stages[1].training
    assert not is_exporting() and torch.is_grad_enabled()
    out = OnnxModel(tmp_path / 'm.onnx', threads=1)(torch.randn(1, 3, 32, 32))
    assert [t.shape[1] for t in out] == [8, 16, 24, 32]


def test_unsupported_operator_is_named(tmp_path, monkeypatch):
    class Svd(nn.Module):
        def forward(self, x):
            return torch.linalg.svd(x)[1]

    with pytest.raises(OnnxExportError, match=r'Svd .*operator aten::linalg_svd'):
        export_onnx(Svd(), tmp_path / 'svd.onnx', (8, 8))
    # LITv2 without its export path: torchvision's deformable convolution (no ONNX form here)
    import vattn_mm.layers.tokens as dtm
    monkeypatch.setattr(dtm, 'is_exporting', lambda: False)
    with pytest.raises(OnnxExportError, match=r'LITv2 .*operator torchvision::deform_conv2d'):
        export_onnx(build_micro('LITv2'), tmp_path / 'litv2.onnx', EXPORT_SIZE)


def run_tool(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / 'tools/deploy/export_onnx.py'), *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_tool_end_to_end(tmp_path):
    from vattn_mm.analysis import build_spec
    model = build_spec('PVTv2:b0')
    model.init_weights()
    ckpt = tmp_path / 'b0.pth'
    torch.save({'state_dict': model.state_dict()}, ckpt)
    out = tmp_path / 'b0.onnx'
    result = run_tool('PVTv2:b0', str(ckpt), '--out', str(out), '--size', '64', '64',
                      '--check-sizes', '64', '64', '96', '128', '77', '61')
    assert result.returncode == 0, result.stdout + result.stderr
    assert out.is_file() and 'max relative error' in result.stdout and ' OK' in result.stdout
    assert result.stdout.count(' yes') == 12
    # the ONNX file reproduces the checkpoint's weights, not a fresh init
    got = OnnxModel(out, threads=1)(torch.ones(1, 3, 64, 64))[-1]
    with torch.no_grad():
        torch.testing.assert_close(got, model.eval()(torch.ones(1, 3, 64, 64))[-1],
                                   rtol=1e-4, atol=1e-4)


def load_tool():
    return load_script('deploy/export_onnx.py')


def test_tool_exports_config_backbone_and_neck(tmp_path):
    """CONFIG CKPT: the backbone + FPN of a detector, a trained model's weights."""
    tool = load_tool()
    config = str(ROOT / 'configs/demo/pvtv2_b0_maskrcnn_demo.py')
    trained = tool.build_from_config(config, None)
    ckpt = tmp_path / 'det.pth'
    state = {f'{part}.{k}': v for part in ('backbone', 'neck')
             for k, v in getattr(trained, part).state_dict().items()}
    torch.save({'state_dict': {**state, 'rpn_head.rpn_conv.weight': torch.zeros(1)}}, ckpt)
    model = tool.build_from_config(config, str(ckpt))
    for key, value in model.state_dict().items():
        assert torch.equal(value, state[key]), key
    assert_exports(model, tmp_path / 'det.onnx', sizes=((64, 64), (77, 61)))


def test_tool_refuses_bad_input(tmp_path, capsys):
    tool = load_tool()
    bad = tmp_path / 'bad.pth'
    torch.save({'state_dict': {'nonsense.weight': torch.zeros(1)}}, bad)
    assert tool.main(['PVTv2:b0', str(bad), '--out', str(tmp_path / 'x.onnx')]) == 2
    assert 'does not fit' in capsys.readouterr().err
    assert not (tmp_path / 'x.onnx').exists()
    with pytest.raises(SystemExit) as exit_info:
        tool.main(['PVTv2:b0', '--out', str(tmp_path / 'x.onnx')])
    assert exit_info.value.code == 2 and '--random-init' in capsys.readouterr().err
    assert tool.main(['NoSuch:b0', '--random-init', '--out', str(tmp_path / 'x.onnx')]) == 2
    assert 'unknown backbone family' in capsys.readouterr().err
