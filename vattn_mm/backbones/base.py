"""The contract every vattn-mm pyramid backbone follows (the stages it is
built from: :mod:`.stage`).

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
import logging
from dataclasses import dataclass, field
from typing import Any, ClassVar, Mapping, Optional, Sequence, Union

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.utils.checkpoint import checkpoint

from .. import ops
from ..layers import apply_position, tokens_to_map
from ..layers.tokens import Size
from ..ops import is_exporting
from ..utils.log import log
from .keymap import KeyMap
from .loading import FamilyConverter, load_pretrained
from .stage import PyramidStage, StageSpec, build_stage, init_transformer_weights


def dense_output(x: torch.Tensor) -> torch.Tensor:
    """A stage map as the dense heads need it: contiguous NCHW.

    Maps viewed from (B, N, C) tokens are channels-last in memory (the next
    stage's convolutions want them so).  Heads must not get them: the FPN's
    convolutions pass the layout on (for batches of square images), and
    mmcv's ``RoIAlign`` reads any input as contiguous NCHW, so Mask R-CNN
    trained on scrambled RoI features (demo: bbox AP 0.02 instead of 0.73).
    The official backbones return contiguous maps too."""
    return x.contiguous()


@dataclass(frozen=True)
class CheckArchs:
    """The architectures of a backbone that the test suite and the GPU check
    (``.dev_scripts/gpu_check``) build.

    Attributes:
        micro: a tiny arch dict (all stages, every block type) for the
            suite's fast checks.
        representative: a named arch of ``arch_zoo`` that the GPU check runs
            at full size (autocast, fast paths).
        micro_kwargs: constructor arguments of the micro backbone besides
            its arch.
        micro_size: the input size the micro backbone runs at.
        timed: whether the GPU check times the training step of the
            ``representative`` arch.
    """

    micro: dict[str, Any]
    representative: str
    micro_kwargs: dict[str, Any] = field(default_factory=dict)
    micro_size: tuple[int, int] = (64, 64)
    timed: bool = True


class PyramidBackbone(nn.Module):
    """Base class of the registered backbones.

    Subclasses define ``arch_zoo``, ``check_archs`` and their family facts
    (below), and build their stages with :meth:`build_stages` from one
    :class:`StageSpec` each.  Forward is the same for all: pad the input to
    :attr:`size_multiple`, then per stage patch embedding, blocks, output
    norm; outputs cropped back.

    Args:
        fast_paths: which registered fast paths (:mod:`vattn_mm.ops`) the
            layers take: ``None`` / ``'default'`` (the registry's defaults,
            or the ``VATTN_FAST_PATHS`` environment variable), ``'plain'``
            (plain PyTorch only) or ``{name: True | False | 'default' |
            devices}``; same outputs and gradients up to float rounding
            (docs/training.md, "Fast paths").
    """

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
    #: True when the normalised stage output is also the next stage's input
    norm_feeds_next: ClassVar[bool] = True
    #: what the test suite and the GPU check build (every registered
    #: backbone declares its own)
    check_archs: ClassVar[CheckArchs]

    # family facts: how the official releases are stored and what they compute
    #: official <-> vattn-mm keys (``None``: the class has no official release)
    converter: ClassVar[Optional[FamilyConverter]] = None
    #: how the released ImageNet files wrap the state dict (``'model'``:
    #: ``{'model': sd}``; ``None``: raw)
    official_wrapper: ClassVar[Optional[str]] = None
    #: official prefix of the norm the ImageNet classifier applies to the last
    #: stage before pooling, where that norm is not a backbone key (``'norm.'``);
    #: ``None``: the backbone holds it (PVTv2's ``norm4``) or there is none (P2T)
    classifier_norm: ClassVar[Optional[str]] = None
    #: the official ImageNet classifier's head keys -> mmpretrain
    #: ``ImageClassifier`` keys: ``head.fc.*`` (the linear layer) and, where
    #: the head is more than that, ``neck.*`` of :meth:`imagenet_neck`
    classifier_head_keys: ClassVar[KeyMap] = KeyMap((('head.', 'head.fc.'), ))

    def __init__(self, arch: Union[str, Mapping[str, Any]],
                 out_indices: Sequence[int] = (0, 1, 2, 3),
                 frozen_stages: int = -1, norm_eval: bool = False,
                 with_cp: bool = False, init_cfg: Optional[Union[dict, list]] = None,
                 fast_paths: ops.Setting = None):
        super().__init__()
        self.init_cfg = copy.deepcopy(init_cfg)
        self._is_init = False
        self.fast_paths = ops.check_setting(fast_paths)
        self.arch_name, self.arch = self.parse_arch(arch)
        self.num_stages = self.stage_count(self.arch)
        self.out_indices = self._check_out_indices(out_indices)
        if not -1 <= frozen_stages <= self.num_stages:
            raise ValueError(f'frozen_stages must be in [-1, {self.num_stages}], '
                             f'got {frozen_stages}')
        self.frozen_stages = frozen_stages
        self.norm_eval = norm_eval
        self.with_cp = with_cp

    # ---------------------------------------------------------- family
    @classmethod
    def family(cls) -> str:
        """The family name the converters and tools use (``'pvtv2'``)."""
        return cls.__name__.lower()

    @classmethod
    def checkpoint_converter(cls) -> FamilyConverter:
        """What loading uses: the family's converter, or vattn-mm keys only."""
        return cls.converter or FamilyConverter(cls.family(), KeyMap(()))

    @classmethod
    def imagenet_settings(cls, arch: Union[str, Mapping[str, Any]],
                          official_sd: Optional[Mapping[str, torch.Tensor]] = None
                          ) -> tuple[dict, dict]:
        """``(arch updates, constructor kwargs)`` with which this backbone
        computes the released ImageNet model's features where the dense
        defaults differ (read from ``official_sd`` where it tells)."""
        return {}, {}

    # ----------------------------------------------------------- build
    def build_stages(self, specs: Sequence[StageSpec]) -> None:
        """Build ``self.stages`` and record what the stages give:
        :attr:`out_channels`, :attr:`strides` and :attr:`size_multiple`."""
        self.stages = nn.ModuleList(build_stage(i, spec) for i, spec in enumerate(specs))
        ops.configure(self, self.fast_paths)
        #: channels of every stage's output
        self.out_channels = [spec.embed_dims for spec in specs]
        multiples = [stage.size_multiple for stage in self.stages]
        #: input sides are zero-padded (right / bottom) to a multiple of this and
        #: the outputs cropped back, so mixers that need divisible maps
        #: (QuadTree) take any input size
        self.size_multiple = 1
        self.strides: list[Optional[int]] = []
        stride = 1
        for stage in self.stages:
            step = getattr(stage.patch_embed, 'stride', None)
            stride = None if step is None or stride is None else stride * step
            self.strides.append(stride)
        for i, multiple in enumerate(multiples):
            if multiple > 1:
                if self.strides[i] is None:
                    raise ValueError(
                        f'{type(self).__name__}: the mixer of stage {i} needs map sides '
                        f'divisible by {multiple} but the patch embeddings up to it do not '
                        'declare their stride')
                self.size_multiple = max(self.size_multiple, self.strides[i] * multiple)
        #: smallest image side the backbone takes
        self.min_input_size = self.smallest_input_side()

    def imagenet_neck(self) -> Optional[dict]:
        """Config of the registered module between the last stage's map and
        the final linear layer of the official ImageNet classifier (an
        mmpretrain neck with an ``out_channels`` attribute), where that is
        more than global average pooling; ``None``: it is pooling."""
        return None

    def smallest_input_side(self) -> int:
        """Smallest image side the backbone takes (read once, when the stages
        are built, as :attr:`min_input_size`)."""
        return 1

    # ----------------------------------------------------------------- arch
    @classmethod
    def stage_count(cls, arch: Mapping[str, Any]) -> int:
        """Number of output stages of a parsed arch (``len(depths)``)."""
        return len(arch['depths'])

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
        num_stages = cls.stage_count(parsed)
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
    @property
    def is_init(self) -> bool:
        """Whether :meth:`init_weights` ran with an ``init_cfg`` (what MMEngine's
        ``BaseModule`` reads before it calls a child's ``init_weights``)."""
        return self._is_init

    def init_weights(self) -> None:
        """Initialise the weights: the transformer init without ``init_cfg``;
        MMEngine's initialisers for an ``init_cfg`` that names them; strict
        loading of a checkpoint for ``init_cfg=dict(type='Pretrained', ...)``."""
        cfgs = self.init_cfg if isinstance(self.init_cfg, list) else [self.init_cfg]
        pretrained = [c for c in cfgs if isinstance(c, Mapping) and c.get('type') == 'Pretrained']
        if not pretrained:
            if self.init_cfg is None:
                self.apply(init_transformer_weights)
            elif self._is_init:
                log(f'init_weights of {type(self).__name__} has been called more than once.',
                    logging.WARNING)
            else:
                self._initialise(cfgs)
            return
        cfg = pretrained[0]
        if 'checkpoint' not in cfg:
            raise ValueError(f'{type(self).__name__}: init_cfg Pretrained needs a checkpoint')
        self.apply(init_transformer_weights)  # for dense-only keys
        load_pretrained(self, cfg['checkpoint'], self.checkpoint_converter(),
                        prefix=cfg.get('prefix'), verbose=True)
        self._is_init = True

    def _initialise(self, cfgs: list) -> None:
        """Apply MMEngine's initialisers (``dict(type='TruncNormal', ...)``)."""
        try:
            from mmengine.model import initialize
        except ImportError as err:
            raise ImportError(f'{type(self).__name__}: init_cfg {self.init_cfg} names MMEngine '
                              'initialisers and MMEngine is not installed') from err
        initialize(self, cfgs)
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
    def run_stage(self, stage: PyramidStage, x: torch.Tensor, hw: Size) -> torch.Tensor:
        """Apply the stage's position module (before the blocks or after the
        first one) and its blocks to its tokens, with activation
        checkpointing if enabled.

        ``x`` is this backbone's own tensor (a patch embedding's output), so
        without autograd the blocks add their residuals into it in place.
        Tokens viewed from an NCHW map (a conv stem without an output norm,
        DilateFormer's) are made contiguous once here: the blocks' token
        maps then keep channels innermost, which the residual adds, norms and
        linear layers read fastest and :class:`~vattn_mm.layers.TokenMapConv2d`
        needs for its channels-last path."""
        x = x.contiguous()
        inplace = not torch.is_grad_enabled()
        # the extra argument of every mixer call: the stage's shared module, if any
        args = () if stage.shared_name is None else (stage.get_submodule(stage.shared_name), )
        if stage.has_position and stage.position_where == 'embed':
            x = apply_position(stage.position, x, hw, inplace)
        for j, block in enumerate(stage.blocks):
            if self.with_cp and x.requires_grad:
                x = checkpoint(block, x, hw, *args, use_reentrant=False)
            elif inplace:
                x = block(x, hw, *args, inplace=True)
            else:
                x = block(x, hw, *args)
            if j == 0 and stage.has_position and stage.position_where == 'after_first_block':
                x = apply_position(stage.position, x, hw, inplace)
        return x

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        """Token pipeline: patch embedding, blocks and norm per stage, up to
        the last stage in ``out_indices``; returns contiguous NCHW maps
        (:func:`dense_output`)."""
        return self.forward_stages(x, self.out_indices)

    def forward_stages(self, x: torch.Tensor, indices: Sequence[int]) -> tuple[torch.Tensor, ...]:
        """:meth:`forward` with the maps of the stages ``indices`` (sorted,
        non-negative) instead of ``out_indices``."""
        h, w = x.shape[-2:]
        if min(h, w) < self.min_input_size:
            raise ValueError(f'{type(self).__name__}: input {h}x{w} is too small; each '
                             f'side needs at least {self.min_input_size} px')
        multiple = self.size_multiple
        # positive operands only: traced, floor and truncating division agree
        pad_h, pad_w = (multiple - h % multiple) % multiple, (multiple - w % multiple) % multiple
        # traced for export, the sizes are symbolic: pad and crop always (a
        # no-op where the sides are multiples already)
        padded = is_exporting() or bool(pad_h or pad_w)
        if padded:
            x = F.pad(x, (0, pad_w, 0, pad_h))
        outs = []
        for i, stage in enumerate(self.stages[:indices[-1] + 1]):
            tokens, hw = stage.patch_embed(x)
            tokens = self.run_stage(stage, tokens, hw)
            if self.norm_feeds_next:
                x = out = tokens_to_map(stage.norm(tokens), hw)
            else:
                x = tokens_to_map(tokens, hw)
                out = tokens_to_map(stage.norm(tokens), hw) if i in indices else None
            if i in indices:
                if padded:   # the sizes an unpadded input gives
                    stride = self.strides[i]
                    out = out[..., :(h + stride - 1) // stride, :(w + stride - 1) // stride]
                outs.append(dense_output(out))
        return tuple(outs)
