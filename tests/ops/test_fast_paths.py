"""Every registered fast path: on and off give the same outputs and
gradients for the modules using it (float32 on the CPU, up to float
rounding: rtol 1e-5, atol 1e-5 for a module; rtol 1e-4, atol 1e-4 through a
whole backbone), each path is held by some backbone, and the backbone's
``fast_paths`` setting and the environment variable reach every layer."""
from collections import Counter
from pathlib import Path
from typing import Callable

import pytest
import torch
from torch import nn

from vattn_mm import ops
from vattn_mm.layers import (MLP, BiasedDeformConv2d, ConvFFN, ConvNormAct, DepthwiseConv2d,
                             FocalModulation, MultiScaleDilatedAttention, QuadtreeAttention,
                             SpatialReductionAttention, TokenBlock, TokenMapConv2d,
                             tokens_to_map)

from ..backbone_cases import CASES, build_micro
from .grads import move_off_init, weighted_grads

HW = (6, 7)
DOCS = Path(__file__).resolve().parents[2] / 'docs' / 'training.md'


def _tokens(channels: int) -> torch.Tensor:
    return torch.randn(2, HW[0] * HW[1], channels)


def _token_map(channels: int) -> torch.Tensor:
    return tokens_to_map(_tokens(channels), HW)


def _deform_conv() -> BiasedDeformConv2d:
    """Off its zero offsets, where every sample sits on a pixel (the kink of
    bilinear sampling, whose one-sided gradient the two kernels may take from
    either side)."""
    conv = BiasedDeformConv2d(16, 24, 2, stride=2)
    with torch.no_grad():
        for param in conv.conv_offset.parameters():
            param.normal_(0, 0.1)
    return conv


#: path -> [(module factory, input factory, call, train)]: ``call(module, x)``
#: runs the module; ``train``: forward and backward, else inference
#: (no autograd), the mode the path serves
CASES_BY_PATH: dict[str, list[tuple[Callable, Callable, Callable, bool]]] = {
    'fused_act': [
        (lambda: MLP(16, 48, chunk_tokens=None), lambda: _tokens(16), lambda m, x: m(x, HW),
         False),
        (lambda: ConvFFN(16, 48), lambda: _tokens(16), lambda m, x: m(x, HW), False),
        (lambda: FocalModulation(16, 2, 3), lambda: _tokens(16), lambda m, x: m(x, HW), False),
        (lambda: ConvNormAct(16, 24, 3, act_cfg=dict(type='HSwish')), lambda: _token_map(16),
         lambda m, x: m(x), False)],
    'token_map_conv': [
        (lambda: DepthwiseConv2d(16, 3), lambda: _token_map(16), lambda m, x: m(x), True),
        (lambda: TokenMapConv2d(16, 24, 3, 2, 1), lambda: _token_map(16), lambda m, x: m(x),
         True),
        (lambda: DepthwiseConv2d(16, 13), lambda: _token_map(16), lambda m, x: m(x), False)],
    'depthwise_weight_grad': [
        (lambda: DepthwiseConv2d(16, 7), lambda: _token_map(16), lambda m, x: m(x), True)],
    'recompute_act': [
        (lambda: MLP(16, 48), lambda: _tokens(16), lambda m, x: m(x, HW), True)],
    'recompute_norm': [
        (lambda: TokenBlock(16, SpatialReductionAttention(16, 2, sr_ratio=2), MLP(16, 32)),
         lambda: _tokens(16), lambda m, x: m(x, HW), True)],
    'ffn_hidden_groups': [
        (lambda: ConvFFN(16, 48, act_cfg=dict(type='HSwish'), pre_act_cfg=dict(type='HSwish')),
         lambda: _tokens(16), lambda m, x: m(x, HW), True)],
    'mlp_inference_chunks': [
        (lambda: MLP(16, 48, chunk_tokens=10), lambda: _tokens(16), lambda m, x: m(x, HW),
         False)],
    'focal_recompute': [
        (lambda: FocalModulation(16, 2, 3), lambda: _tokens(16), lambda m, x: m(x, HW), True)],
    'quadtree_chunks': [
        (lambda: QuadtreeAttention(16, 2, 2, topks=(2, 2)), lambda: torch.randn(2, 64, 16),
         lambda m, x: m(x, (8, 8)), True)],
    'dilated_attention_backward': [
        (lambda: MultiScaleDilatedAttention(16, 2, dilation=(1, 2)), lambda: _tokens(16),
         lambda m, x: m(x, HW), True)],
    'dilated_bands': [
        (lambda: MultiScaleDilatedAttention(16, 2, dilation=(1, 2), chunk_tokens=14),
         lambda: _tokens(16), lambda m, x: m(x, HW), False)],
    'gathered_deform_conv': [
        (_deform_conv, lambda: _token_map(16)[:, :, :6, :6], lambda m, x: m(x), True)],
}


def _run(module: nn.Module, x: torch.Tensor, call: Callable, train: bool):
    """Outputs (and gradients of the input and parameters when ``train``),
    and the count of every operator the run called."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        if train:
            x = x.detach().requires_grad_()
            results = weighted_grads(call(module, x), [x, *module.parameters()])
        else:
            with torch.no_grad():
                results = [call(module, x)]
    return results, Counter(event.name for event in prof.events())


@pytest.mark.parametrize('path, index', [(path, i) for path, cases in CASES_BY_PATH.items()
                                         for i in range(len(cases))])
def test_path_on_and_off_agree(path, index):
    """The path changes the operators that run (it is taken) but not the
    outputs and gradients."""
    if ops.FAST_PATHS[path].unavailable:
        pytest.skip(f'{path}: {ops.FAST_PATHS[path].unavailable}')
    make, make_input, call, train = CASES_BY_PATH[path][index]
    torch.manual_seed(0)
    module, x = make().train(train), make_input()
    on, on_ops = _run(ops.configure(module, {path: True}), x, call, train)
    off, off_ops = _run(ops.configure(module, {path: False}), x, call, train)
    assert on_ops != off_ops, f'{path} was not taken'
    for a, b in zip(on, off):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_every_registered_path_has_cases():
    assert sorted(CASES_BY_PATH) == sorted(ops.FAST_PATHS)


@pytest.fixture(scope='module')
def micro_models():
    """name -> the micro backbone, with the registry's defaults and every
    parameter moved off its initial value (:func:`~.grads.move_off_init`)."""
    torch.manual_seed(0)
    return {name: move_off_init(build_micro(name)) for name in CASES}


def test_every_registered_path_is_used_by_a_backbone(micro_models):
    """A path that no backbone's layer holds is dead code (paths this
    PyTorch cannot take are off everywhere)."""
    held = {row['name'] for model in micro_models.values() for row in ops.describe(model)
            if row['on_in_model']}
    available = {name for name, path in ops.FAST_PATHS.items() if not path.unavailable}
    assert held == available, f'unused fast paths: {available - held}'


def _outputs_and_grads(model: nn.Module, img: torch.Tensor) -> list:
    model.train()
    img = img.detach().requires_grad_()
    outs = model(img)
    loss = sum((out * torch.linspace(-1, 1, out.numel()).view_as(out)).sum() for out in outs)
    grads = torch.autograd.grad(loss, [img, *model.parameters()], allow_unused=True)
    model.eval()
    with torch.no_grad():
        inference = model(img)
    return [o.detach() for o in outs] + [g for g in grads if g is not None] + list(inference)


def _switches(model: nn.Module) -> list:
    return [(name, attr, sorted(value.devices)) for name, module in model.named_modules()
            for attr, value in vars(module).items() if isinstance(value, ops.Switch)]


@pytest.mark.parametrize('name', sorted(CASES))
def test_plain_setting_and_environment_match_the_defaults(name, micro_models, monkeypatch):
    """``fast_paths='plain'`` and ``VATTN_FAST_PATHS=plain`` switch every
    path off in every layer, with the default's outputs and gradients
    (training) and outputs (inference)."""
    monkeypatch.delenv(ops.ENV_VAR, raising=False)
    default = micro_models[name]
    plain = build_micro(name, fast_paths='plain')
    monkeypatch.setenv(ops.ENV_VAR, 'plain')
    from_env = build_micro(name)
    monkeypatch.delenv(ops.ENV_VAR)
    assert any(row['on_in_model'] for row in ops.describe(default))
    assert not any(row['on_in_model'] for row in ops.describe(plain))
    assert _switches(from_env) == _switches(plain)
    plain.load_state_dict(default.state_dict())
    img = torch.randn(1, 3, *CASES[name].micro_size)
    for a, b in zip(_outputs_and_grads(plain, img), _outputs_and_grads(default, img)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)


def test_bad_setting_is_named():
    with pytest.raises(ValueError, match='unknown path'):
        build_micro('PVTv2', fast_paths=dict(recompute_everything=False))


def _docs_row(row: dict) -> str:
    return (f"| `{row['name']}` | {row['reason']} | {', '.join(row['devices'])} | "
            f"{', '.join(row['default_devices'])} | {', '.join(row['dtypes'])} | "
            f"{', '.join(row['modes'])} |")


def test_docs_table_lists_every_registered_path():
    """docs/training.md's table of fast paths is the registry's
    (``ops.describe()``), row for row."""
    text = DOCS.read_text()
    section = text[text.index('\n## Fast paths\n'):]
    section = section[:section.find('\n## ', 1)]
    rows = [_docs_row(row) for row in ops.describe()]
    missing = [row for row in rows if row not in section]
    assert not missing, 'docs/training.md, "Fast paths", needs the rows\n' + '\n'.join(missing)
    listed = {line.split('`')[1] for line in section.splitlines() if line.startswith('| `')}
    assert listed == set(ops.FAST_PATHS), listed
