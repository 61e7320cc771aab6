"""Checks of the position-module and tokeniser contract: what the suite runs
for every registered position module (``POSITIONS``), every position term a
mixer holds (its ``position_variants``) and every tokeniser
(``TOKENISERS``, in each of its ``tokeniser_roles``), in a tiny
TokenPyramid (``tests/layers/test_positions.py``; ONNX:
``tests/deploy/test_onnx.py``; graph breaks: ``tests/engine/test_compile.py``)."""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import MIXERS, POSITIONS, TOKENISERS

TINY = dict(embed_dims=[16, 16, 32, 32], num_heads=[1, 1, 2, 2], mlp_ratios=[2, 2, 2, 2],
            depths=[1, 1, 1, 1])
STRIDES = (4, 8, 16, 32)


@dataclass(frozen=True)
class Case:
    """One module of the suite: its class and the TokenPyramid options that
    put it in the pyramid (built from its type alone)."""
    name: str
    cls: type
    options: dict

    def build(self, **kwargs) -> TokenPyramid:
        model = TokenPyramid(TINY, drop_path_rate=0., **self.options, **kwargs)
        model.init_weights()
        return model


def position_cases() -> list[Case]:
    """Every position module, and every mixer's position variants."""
    cases = [Case(name, cls, dict(position=dict(type=name))) for name, cls in POSITIONS.items()]
    for mixer, cls in MIXERS.items():
        for variant, settings in getattr(cls, 'position_variants', {}).items():
            cases.append(Case(f'{mixer}:{variant}', cls, dict(mixer=dict(type=mixer, **settings))))
    return sorted(cases, key=lambda c: c.name)


def tokeniser_cases() -> list[Case]:
    """Every tokeniser in every role it declares."""
    return sorted((Case(f'{name}:{role}', cls, {role: dict(type=name)})
                   for name, cls in TOKENISERS.items() for role in cls.tokeniser_roles),
                  key=lambda c: c.name)


CASES = {c.name: c for c in position_cases() + tokeniser_cases()}


def covering_pyramids() -> dict[str, dict]:
    """TokenPyramid options that together hold every position module, mixer
    position variant and tokeniser (one of each kind per stage, round
    robin; a stage left over has no position module and an FFN-only
    block): what the ONNX and compile checks export / trace.  A tokeniser
    that is also a patch embedding is there in that role (stages 1-3), the
    stem-only ones as stems."""
    positions = sorted(POSITIONS)
    variants = [dict(type=m, **s) for m, cls in sorted(MIXERS.items())
                for s in getattr(cls, 'position_variants', {}).values()]
    stems = sorted(n for n, c in TOKENISERS.items() if c.tokeniser_roles == ('stem', ))
    embeds = sorted(n for n, c in TOKENISERS.items() if 'patch_embed' in c.tokeniser_roles)
    count = max(math.ceil(len(positions) / 4), math.ceil(len(variants) / 4), len(stems),
                math.ceil(len(embeds) / 3))
    pyramids = {}
    for i in range(count):
        stages = range(4 * i, 4 * i + 4)
        options = dict(
            position=[dict(type=positions[j]) if j < len(positions) else None for j in stages],
            mixer=[variants[j] if j < len(variants) else None for j in stages],
            stem=dict(type=stems[i % len(stems)]),
            patch_embed=[dict(type=embeds[(3 * i + j) % len(embeds)]) for j in range(4)])
        pyramids[f'{i}-{options["stem"]["type"]}'] = options
    return pyramids


def build_covering(options: dict) -> TokenPyramid:
    model = TokenPyramid(TINY, drop_path_rate=0., **options)
    model.init_weights()
    return model


def instances(model: torch.nn.Module, cls: type) -> list:
    return [m for m in model.modules() if type(m) is cls]


def output_shapes(size) -> list:
    return [(c, math.ceil(size[0] / s), math.ceil(size[1] / s))
            for c, s in zip(TINY['embed_dims'], STRIDES)]


# ----------------------------------------------------------------- checks
def check_forward_backward(name: str, size: tuple[int, int]) -> None:
    """Built from its type alone: forward and backward at ``size``, the
    pyramid's output shapes, finite gradients for every parameter and
    non-zero ones for the module's own."""
    case = CASES[name]
    model = case.build().train()
    modules = instances(model, case.cls)
    assert modules, f'{name}: no {case.cls.__name__} in the pyramid'
    x = torch.randn(2, 3, *size, requires_grad=True)
    outs = model(x)
    assert [tuple(o.shape[1:]) for o in outs] == output_shapes(size)
    torch.manual_seed(0)
    sum((o * torch.randn_like(o)).sum() for o in outs).backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for key, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), key
    for module in modules:
        for key, p in module.named_parameters():
            assert p.grad.abs().sum() > 0, f'{name}: {key} gets no gradient'


def check_batch_independence(name: str) -> None:
    model = CASES[name].build().eval()
    x = torch.randn(2, 3, 32, 48)
    with torch.no_grad():
        both, first = model(x), model(x[:1])
    for a, b in zip(both, first):
        torch.testing.assert_close(a[:1], b, rtol=1e-4, atol=1e-5)


def check_resolution_transfer(name: str) -> None:
    """Trained a step on 32x32 inputs, the pyramid runs on other grids
    (another aspect ratio, odd sides): right shapes, finite outputs."""
    model = CASES[name].build().train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    sum(o.square().mean() for o in model(torch.randn(2, 3, 32, 32))).backward()
    opt.step()
    model.eval()
    with torch.no_grad():
        for size in ((64, 48), (37, 53)):
            outs = model(torch.randn(1, 3, *size))
            assert [tuple(o.shape[1:]) for o in outs] == output_shapes(size), size
            assert all(torch.isfinite(o).all() for o in outs), size


def check_tells_positions_apart(name: str) -> None:
    """A position module's output for identical tokens differs between
    positions, at the training grid of a pyramid and at other grids."""
    case = CASES[name]
    model = case.build()
    for stage in model.stages:
        module = getattr(stage, 'position', None) or stage.blocks[0].pos_embed
        assert type(module) is case.cls
        channels = stage.norm.normalized_shape[0]
        for hw in ((14, 14), (9, 13), (3, 5)):
            with torch.no_grad():
                term = module(torch.ones(1, hw[0] * hw[1], channels), hw)
            assert term.shape[-2:] == (hw[0] * hw[1], channels), (name, hw, term.shape)
            assert (term - term[:, :1]).abs().amax() > 1e-6, (name, hw)
