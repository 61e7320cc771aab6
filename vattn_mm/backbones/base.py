"""The contract every vattn-mm pyramid backbone follows.

``arch`` (a name from the class's ``arch_zoo`` or a dict with the official
hyper-parameter names), ``out_indices``, ``frozen_stages``, ``norm_eval``,
``with_cp`` (activation checkpointing) and strict loading of official or
vattn-mm checkpoints through ``init_cfg=dict(type='Pretrained', checkpoint=...)``.

Every backbone keeps its weights in ``self.stages``; stage ``i`` owns its patch
embedding (``stages[i].patch_embed``, the stem for ``i == 0``), its blocks and
its output norm, so freezing and key conversion work the same for all.
"""
from __future__ import annotations

import copy
import math
from typing import Any, ClassVar, Mapping, Optional, Sequence, Union

import torch
from mmengine.logging import MMLogger
from mmengine.model import BaseModule
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.checkpoint import checkpoint

from ..checkpoint import FamilyConverter, load_pretrained
from ..layers import tokens_to_map


def drop_path_schedule(depths: Sequence[int], rate: float) -> list[list[float]]:
    """Stochastic-depth rates rising linearly over all blocks, split by stage."""
    total = sum(depths)
    rates = [rate * i / max(total - 1, 1) for i in range(total)]
    out, start = [], 0
    for d in depths:
        out.append(rates[start:start + d])
        start += d
    return out


def init_transformer_weights(module: nn.Module) -> None:
    """ViT-style init: truncated-normal linears, unit norms, fan-out convs."""
    if isinstance(module, nn.Linear):
        nn.init.trunc_normal_(module.weight, std=.02)
        if module.bias is not None:
            nn.init.zeros_(module.bias)
    elif isinstance(module, (nn.LayerNorm, nn.GroupNorm, _BatchNorm)):
        if module.weight is not None:
            nn.init.ones_(module.weight)
            nn.init.zeros_(module.bias)
    elif isinstance(module, nn.Conv2d):
        fan_out = module.kernel_size[0] * module.kernel_size[1] \
            * module.out_channels // module.groups
        nn.init.normal_(module.weight, 0, math.sqrt(2.0 / fan_out))
        if module.bias is not None:
            nn.init.zeros_(module.bias)


def dense_output(x: torch.Tensor) -> torch.Tensor:
    """A stage map as the dense heads need it: contiguous NCHW.

    Maps viewed from (B, N, C) tokens are channels-last in memory (the next
    stage's convolutions want them so).  Heads must not get them: the FPN's
    convolutions pass the layout on (for batches of square images), and
    mmcv's ``RoIAlign`` reads any input as contiguous NCHW, so Mask R-CNN
    trained on scrambled RoI features (demo: bbox AP 0.02 instead of 0.73).
    The official backbones return contiguous maps too."""
    return x.contiguous()


class PyramidStage(nn.Module):
    """One stage: patch embedding, blocks and (optionally) an output norm."""

    def __init__(self, patch_embed: nn.Module, blocks: Sequence[nn.Module],
                 norm: Optional[nn.Module] = None, **extra: nn.Module):
        super().__init__()
        self.patch_embed = patch_embed
        self.blocks = nn.ModuleList(blocks)
        self.norm = norm if norm is not None else nn.Identity()
        for name, module in extra.items():
            self.add_module(name, module)


class PyramidBackbone(BaseModule):
    """Base class; subclasses define ``arch_zoo``, ``converter`` and build
    ``self.stages`` (a ``ModuleList`` of :class:`PyramidStage`)."""

    #: named variants: ``name -> dict`` of official hyper-parameter names
    arch_zoo: ClassVar[dict[str, dict[str, Any]]] = {}
    #: optional arch keys and their defaults
    arch_defaults: ClassVar[dict[str, Any]] = {}
    #: official constructor keys accepted in an arch dict but without effect
    #: here (training-time or classification-only settings)
    arch_ignored: ClassVar[frozenset] = frozenset(
        {'num_classes', 'drop_rate', 'drop_path_rate', 'norm_layer', 'num_stages'})
    #: arch keys that hold one value per stage
    per_stage_keys: ClassVar[tuple[str, ...]] = ()
    converter: ClassVar[FamilyConverter]
    #: True when the normalised stage output is also the next stage's input
    norm_feeds_next: ClassVar[bool] = True

    def __init__(self, arch: Union[str, Mapping[str, Any]],
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1, norm_eval: bool = False,
                 with_cp: bool = False, init_cfg: Optional[Union[dict, list]] = None):
        super().__init__(init_cfg=copy.deepcopy(init_cfg))
        self.arch_name, self.arch = self.parse_arch(arch)
        self.num_stages = len(self.arch['depths'])
        self.out_indices = self._check_out_indices(out_indices)
        if not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {self.num_stages}], '
                             f'got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    # ----------------------------------------------------------------- arch
    @classmethod
    def parse_arch(cls, arch: Union[str, Mapping[str, Any]]) -> tuple[str, dict]:
        """Resolve ``arch`` to ``(name, hyper-parameters)`` or raise a clear error."""
        name = cls.__name__
        if isinstance(arch, str):
            key = arch.lower()
            if key not in cls.arch_zoo:
                raise ValueError(f'{name}: unknown arch {arch!r}; choose one of '
                                 f'{sorted(cls.arch_zoo)} or pass a dict')
            return key, {**cls.arch_defaults, **copy.deepcopy(cls.arch_zoo[key])}
        if not isinstance(arch, Mapping):
            raise TypeError(f'{name}: arch must be a name or a dict, got '
                            f'{type(arch).__name__}')
        known = set(next(iter(cls.arch_zoo.values())))
        required = known - set(cls.arch_defaults)
        missing = sorted(required - set(arch))
        unknown = sorted(set(arch) - known - set(cls.arch_defaults) - cls.arch_ignored)
        if missing or unknown:
            raise ValueError(f'{name}: bad arch dict'
                             + (f'; missing keys {missing}' if missing else '')
                             + (f'; unknown keys {unknown}' if unknown else '')
                             + f' (expected {sorted(known | set(cls.arch_defaults))})')
        parsed = {**cls.arch_defaults,
                  **{k: copy.deepcopy(v) for k, v in arch.items()
                     if k not in cls.arch_ignored}}
        num_stages = len(parsed['depths'])
        for key in cls.per_stage_keys:
            value = parsed.get(key)
            if isinstance(value, (list, tuple)) and len(value) != num_stages:
                raise ValueError(f'{name}: arch[{key!r}] has {len(value)} entries '
                                 f'but there are {num_stages} stages')
        return 'custom', parsed

    def _check_out_indices(self, out_indices: Sequence[int]) -> tuple[int, ...]:
        if isinstance(out_indices, int):
            out_indices = [out_indices]
        norm = []
        for i in out_indices:
            j = i + self.num_stages if i < 0 else i
            if not 0 <= j < self.num_stages:
                raise ValueError(f'out_indices {tuple(out_indices)} out of range for '
                                 f'{self.num_stages} stages')
            norm.append(j)
        return tuple(sorted(set(norm)))

    # ------------------------------------------------------------ weights
    def init_weights(self) -> None:
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        pretrained = [c for c in cfgs if isinstance(c, Mapping) and c.get('type') == 'Pretrained']
        if not pretrained:
            if self.init_cfg is None:
                self.apply(init_transformer_weights)
            else:
                super().init_weights()
            return
        cfg = pretrained[0]
        if 'checkpoint' not in cfg:
            raise ValueError(f'{type(self).__name__}: init_cfg Pretrained needs a checkpoint')
        self.apply(init_transformer_weights)  # for dense-only keys
        load_pretrained(self, cfg['checkpoint'], self.converter,
                        prefix=cfg.get('prefix'), logger=MMLogger.get_current_instance())
        self._is_init = True

    # ------------------------------------------------------ train / freeze
    def _freeze_stages(self) -> None:
        if self.frozen_stages < 0:
            return
        frozen = [self.stages[0].patch_embed] + list(self.stages[:self.frozen_stages])
        for module in frozen:
            module.eval()
            for param in module.parameters():
                param.requires_grad = False

    def train(self, mode: bool = True) -> 'PyramidBackbone':
        super().train(mode)
        self._freeze_stages()
        if mode and self.norm_eval:
            for m in self.modules():
                if isinstance(m, _BatchNorm):
                    m.eval()
        return self

    # ------------------------------------------------------------ forward
    def run_blocks(self, blocks: nn.ModuleList, x: torch.Tensor, *args) -> torch.Tensor:
        """Apply ``blocks`` in order, with activation checkpointing if enabled.

        ``x`` is this backbone's own tensor (a patch embedding's output), so
        without autograd the blocks add their residuals into it in place.
        Tokens viewed from an NCHW map (a conv stem without an output norm,
        DilateFormer's) are made contiguous once here: the blocks' token
        maps then keep channels innermost, which the residual adds, norms and
        linear layers read fastest and :class:`~vattn_mm.layers.TokenMapConv2d`
        needs for its channels-last path."""
        x = x.contiguous()
        inplace = not torch.is_grad_enabled()
        for block in blocks:
            if self.with_cp and x.requires_grad:
                x = checkpoint(block, x, *args, use_reentrant=False)
            elif inplace:
                x = block(x, *args, inplace=True)
            else:
                x = block(x, *args)
        return x

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Token pipeline: patch embedding, blocks and norm per stage, up to
        the last stage in ``out_indices``; returns contiguous NCHW maps
        (:func:`dense_output`)."""
        outs = []
        for i, stage in enumerate(self.stages[:self.out_indices[-1] + 1]):
            tokens, hw = stage.patch_embed(x)
            tokens = self.run_blocks(stage.blocks, tokens, hw)
            if self.norm_feeds_next:
                x = out = tokens_to_map(stage.norm(tokens), hw)
            else:
                x = tokens_to_map(tokens, hw)
                out = tokens_to_map(stage.norm(tokens), hw) if i in self.out_indices else None
            if i in self.out_indices:
                outs.append(dense_output(out))
        return tuple(outs)
