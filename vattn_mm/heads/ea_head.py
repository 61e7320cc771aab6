"""EANet's segmentation head (Guo et al., "Beyond Self-attention: External
Attention using Two Linear Layers for Visual Tasks", arXiv:2105.02358) as
an mmseg decode head."""
from __future__ import annotations

from typing import Sequence

import torch
from mmcv.cnn import ConvModule
from mmseg.models.decode_heads.decode_head import BaseDecodeHead

from ..layers import ExternalAttentionUnit
from ..layers.external_attention import OFFICIAL_SLOTS

#: width of the official head's external-attention unit (``fc0``: 2048 -> 512)
OFFICIAL_EA_CHANNELS = 512
#: channels before the classifier (official ``fc1``: 512 -> 256)
OFFICIAL_CHANNELS = 256


def _is_channel_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


class EAHead(BaseDecodeHead):
    """External-attention decode head (EANet).

    On one backbone map (``in_index``, default the last; the official head
    uses only the last ResNet stage): 3x3 conv-norm-ReLU to ``ea_channels``,
    the external-attention unit ``relu(x + EA(x))`` with ``num_slots`` memory
    slots and the official double normalisation
    (:class:`~vattn_mm.layers.ExternalAttentionUnit`), 3x3 conv-norm-ReLU to
    ``channels``, then mmseg's dropout (``dropout_ratio``, official 0.1) and
    1x1 classifier.  ``input_transform='resize_concat'`` with a list of
    ``in_index`` / ``in_channels`` feeds it several levels resized to the
    first one and concatenated instead.  Works on any backbone: it needs only
    the channel counts.

    Args:
        in_channels: channels of the selected map (a list with
            ``'resize_concat'``).
        channels: channels before the classifier (official 256).
        ea_channels: width of the external-attention unit (official 512).
        num_slots: memory slots of the unit (official 64).
        **kwargs: :class:`BaseDecodeHead` arguments (``num_classes``,
            ``norm_cfg``, ``in_index``, ``dropout_ratio``, ``loss_decode``, ...).
    """

    def __init__(self, in_channels, channels: int = OFFICIAL_CHANNELS, *,
                 ea_channels: int = OFFICIAL_EA_CHANNELS, num_slots: int = OFFICIAL_SLOTS,
                 **kwargs):
        self._check_inputs(in_channels, kwargs.get('in_index', -1),
                           kwargs.get('input_transform'))
        for name, value in (('channels', channels), ('ea_channels', ea_channels),
                            ('num_slots', num_slots)):
            if not _is_channel_count(value):
                raise ValueError(f'EAHead: {name} must be a positive integer, got {value!r}')
        super().__init__(in_channels, channels, **kwargs)
        convs = dict(kernel_size=3, padding=1, conv_cfg=self.conv_cfg, norm_cfg=self.norm_cfg,
                     act_cfg=self.act_cfg)
        self.squeeze = ConvModule(self.in_channels, ea_channels, **convs)
        self.external_attention = ExternalAttentionUnit(ea_channels, num_slots,
                                                        norm_cfg=self.norm_cfg)
        self.bottleneck = ConvModule(ea_channels, channels, **convs)

    @staticmethod
    def _check_inputs(in_channels, in_index, input_transform) -> None:
        """Clear errors for what mmseg only asserts."""
        if input_transform is None:
            if not _is_channel_count(in_channels):
                raise ValueError(
                    f'EAHead: in_channels must be one positive int (the channels of the '
                    f'backbone output at in_index={in_index!r}), got {in_channels!r}; for '
                    f"several levels set input_transform='resize_concat' and list in_index")
            if not isinstance(in_index, int):
                raise ValueError(f'EAHead: in_index must be one int without input_transform, '
                                 f'got {in_index!r}')
        elif input_transform == 'resize_concat':
            if not (isinstance(in_channels, Sequence) and isinstance(in_index, Sequence)
                    and len(in_channels) == len(in_index) > 0
                    and all(map(_is_channel_count, in_channels))):
                raise ValueError(
                    "EAHead: input_transform='resize_concat' needs in_channels and in_index "
                    f'as lists of the same length, got in_channels={in_channels!r}, '
                    f'in_index={in_index!r}')
        else:
            raise ValueError(f"EAHead: input_transform must be None or 'resize_concat' (the "
                             f'head takes one map), got {input_transform!r}')

    def forward(self, inputs: Sequence[torch.Tensor]) -> torch.Tensor:
        x = self._transform_inputs(inputs)
        if x.shape[1] != self.in_channels:
            raise ValueError(f'EAHead: expected {self.in_channels} input channels at '
                             f'in_index={self.in_index!r}, got {x.shape[1]} (backbone outputs '
                             f'have channels {[f.shape[1] for f in inputs]}); set in_channels '
                             'to match')
        x = self.bottleneck(self.external_attention(self.squeeze(x)))
        return self.cls_seg(x)
