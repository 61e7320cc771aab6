"""The golden fixture format and the helpers of the golden-reference tests
(fixtures from the official code, copied from shared/golden into
tests/data/golden; see its README).  The GPU check
(``.dev_scripts/gpu_check/golden.py``) reads the fixtures through it too, and
the official Swin block its Swin fixture records, around our attention."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Callable, Iterable, Union

import torch
import torch.nn.functional as F

from vattn_mm.layers import ShiftedWindowAttention

GOLDEN = Path(__file__).parent / 'data' / 'golden'

#: descriptive entries of a fixture's ``arch`` that are not constructor arguments
ARCH_EXTRAS = frozenset({'norm_eps', 'num_classes', 'dense_class', 'cls_class', 'meaning',
                         'dense_path', 'cls_focal_windows'})


def load_fixture(path: Union[str, Path]) -> dict:
    return torch.load(path, map_location='cpu', weights_only=True)


def official_arch(rec: dict, drop: Iterable[str] = ()) -> dict:
    """The fixture's official constructor hyper-parameters (without ``drop``)."""
    skip = ARCH_EXTRAS | set(drop)
    return {k: v for k, v in rec['arch'].items() if k not in skip}


def write_released(rec: dict, directory: Path) -> str:
    """Write the fixture's checkpoint the way the official release wraps it;
    returns its path."""
    sd = rec['checkpoint']
    path = Path(directory) / f"{rec['family']}_{rec['case']}.pth"
    torch.save(sd if rec['checkpoint_wrapper'] is None else {rec['checkpoint_wrapper']: sd}, path)
    return str(path)


def swin_attention(rec: dict) -> ShiftedWindowAttention:
    """The attention of the Swin block fixture (its ``attn.*`` weights)."""
    arch = rec['arch']
    module = ShiftedWindowAttention(arch['dim'], arch['num_heads'], window_size=arch['window_size'],
                                    shift_size=arch['shift_size'], qkv_bias=arch['qkv_bias'])
    attn = {k[len('attn.'):]: v for k, v in rec['checkpoint'].items() if k.startswith('attn.')}
    module.load_state_dict(ShiftedWindowAttention.convert_official_state_dict(attn))
    return module


def swin_block(rec: dict, attention: ShiftedWindowAttention, x: torch.Tensor
               ) -> tuple[torch.Tensor, torch.Tensor]:
    """The official Swin block of the fixture on tokens ``x``, ``attention``
    between its norms and MLP: ``(block output, attention branch)``."""
    arch, sd = rec['arch'], rec['checkpoint']
    hw, c = tuple(arch['input_resolution']), arch['dim']
    weights = {k: v.to(x.device) for k, v in sd.items() if not k.startswith('attn.')}

    def norm(t: torch.Tensor, name: str) -> torch.Tensor:
        return F.layer_norm(t, (c, ), weights[f'{name}.weight'], weights[f'{name}.bias'])
    branch = attention(norm(x, 'norm1'), hw)
    y = x + branch
    hidden = F.gelu(F.linear(norm(y, 'norm2'), weights['mlp.fc1.weight'], weights['mlp.fc1.bias']))
    return y + F.linear(hidden, weights['mlp.fc2.weight'], weights['mlp.fc2.bias']), branch


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
