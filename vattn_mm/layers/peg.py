"""Position encoding generator (CPVT, "Conditional Positional Encodings for
Vision Transformers", Chu et al., arXiv:2102.10882)."""
from __future__ import annotations

from typing import Mapping

import torch

from .builder import register_position
from .tokens import ConvPosEnc

#: official (Twins ``PosCNN``) key -> ours
_OFFICIAL_KEYS = {'proj.0.weight': 'weight', 'proj.0.bias': 'bias'}


@register_position
class PEG(ConvPosEnc):
    """CPVT's PEG as Twins (PCPVT / ALTGVT) uses it: a depthwise ``k x k``
    convolution (zero "same" padding, with bias) of the token map, added to
    the tokens once, after the first block of each stage
    (``default_where = 'after_first_block'``).  The zero padding is what
    tells border tokens where they are.

    Called as ``peg(tokens, (H, W))``; returns the positional term (B, N, C)
    (the official ``PosCNN`` returns ``x + term``; the skeleton adds it).
    Any map size works.  Cost ``O(N * C * k^2)``.
    """

    default_where = 'after_first_block'

    @staticmethod
    def convert_official_state_dict(official_sd: Mapping[str, torch.Tensor]
                                    ) -> dict[str, torch.Tensor]:
        """Our state dict from an official ``PosCNN``'s (``proj.0.weight`` /
        ``proj.0.bias``; in a Twins checkpoint ``pos_block.{i}.`` + those)."""
        if set(official_sd) != set(_OFFICIAL_KEYS):
            raise KeyError(f'official PosCNN state dict must have exactly the keys '
                           f'{sorted(_OFFICIAL_KEYS)}, got {sorted(official_sd)}')
        return {_OFFICIAL_KEYS[k]: v for k, v in official_sd.items()}

    @classmethod
    def from_official(cls, official_sd: Mapping[str, torch.Tensor], in_chans: int,
                      embed_dim: int, s: int = 1) -> 'PEG':
        """Our module with an official ``PosCNN(in_chans, embed_dim, s)``'s
        weights.  Only its position-encoding form converts: ``s == 1`` and
        ``in_chans == embed_dim`` (depthwise); with ``s > 1`` the official
        module is a strided conv without residual, not a position term."""
        if s != 1 or in_chans != embed_dim:
            raise ValueError(f'PEG.from_official: only the depthwise stride-1 PosCNN is a '
                             f'position encoding (in_chans == embed_dim, s == 1), got '
                             f'in_chans={in_chans}, embed_dim={embed_dim}, s={s}')
        kernel_size = official_sd['proj.0.weight'].shape[-1]
        module = cls(embed_dim, kernel_size)
        module.load_state_dict(cls.convert_official_state_dict(official_sd))
        return module
