"""The golden fixture format (``tests/data/golden/README.md``): what the test
suite and the GPU check (:mod:`.gpu_check.golden`) read from a fixture made
with the official code, and the official Swin block its Swin fixture
records, around our attention."""
from __future__ import annotations

from pathlib import Path
from typing import Iterable, Union

import torch
import torch.nn.functional as F

from ..layers import ShiftedWindowAttention

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
