"""Helpers for the golden-reference tests (fixtures from the official code,
copied from shared/golden into tests/data/golden; see its README; the
fixture format itself: :mod:`vattn_mm.analysis.golden_fixtures`)."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import torch

from vattn_mm.analysis.golden_fixtures import (  # noqa: F401  (the tests import them from here)
    load_fixture, official_arch, write_released)

GOLDEN = Path(__file__).parent / 'data' / 'golden'


def case_paths(family: str) -> list[Path]:
    return sorted((GOLDEN / family).glob('*.pt'))


def assert_outputs_match(outs, refs, tol: float = 1e-4) -> None:
    """Each output equals its reference to ``tol`` relative to the output scale."""
    assert len(outs) == len(refs), f'{len(outs)} outputs, expected {len(refs)}'
    for i, (out, ref) in enumerate(zip(outs, refs)):
        assert out.shape == ref.shape, f'output {i}: shape {tuple(out.shape)} != {tuple(ref.shape)}'
        err = (out - ref).abs().max().item()
        scale = max(1.0, ref.abs().max().item())
        assert err <= tol * scale, f'output {i}: max |diff| {err:.3g} > {tol} x {scale:.3g}'


def read_key_list(family_variant: str) -> tuple[dict, dict[str, torch.Tensor]]:
    """Header fields and ``key -> meta tensor`` of a released checkpoint's key list."""
    lines = (GOLDEN / 'keys' / f'{family_variant}.txt').read_text().splitlines()
    header = dict(f.split('=', 1) for f in lines[0].split('\t')[1:] if '=' in f)
    sd = {}
    for line in lines[1:]:
        key, shape = line.split('\t')
        sd[key] = torch.empty(json.loads(shape), device='meta')
    return header, sd


def run_golden_case(path: Path, build: Callable[[dict, str], torch.nn.Module],
                    tmp_path: Path, tol: float = 1e-4) -> torch.nn.Module:
    """Build via ``build(rec, released_checkpoint_path)``, ``init_weights()``,
    run the fixture's input and compare with the official outputs."""
    rec = load_fixture(path)
    model = build(rec, write_released(rec, tmp_path))
    model.init_weights()
    model.eval()
    torch.manual_seed(0)
    with torch.no_grad():
        outs = model(rec['input'])
    assert_outputs_match(outs, rec['outputs'], tol)
    return model


def check_released_keys(family_variant: str, backbone: torch.nn.Module,
                        converter) -> None:
    """The released key list converts onto ``backbone`` with no mismatch."""
    _, sd = read_key_list(family_variant)
    model_sd = {k: v.to('meta') for k, v in backbone.state_dict().items()}
    _, report = converter.match(sd, model_sd)
    assert report.source_format.startswith('official'), report.source_format
    assert report.ok, f'{family_variant}: {report.describe_problems()}'
    assert report.loaded, 'nothing loaded'
