"""Conditions shared by the fast paths' gates: whether a module's hooks
would notice that a fused kernel or a custom autograd function stands in
for its ``forward`` / backward."""
from __future__ import annotations

from torch import nn
from torch.nn.modules import module as _module


def has_forward_hooks(module: nn.Module) -> bool:
    """Forward (pre-)hooks on ``module``: a fused call would bypass them."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


def has_hooks(module: nn.Module) -> bool:
    """Forward or backward hooks on ``module``: a custom autograd function
    would bypass them."""
    return has_forward_hooks(module) or bool(module._backward_hooks
                                             or module._backward_pre_hooks)


def global_forward_hooks() -> bool:
    """Forward hooks registered for every module
    (``nn.modules.module.register_module_forward_hook``)."""
    return bool(_module._global_forward_hooks or _module._global_forward_pre_hooks)
