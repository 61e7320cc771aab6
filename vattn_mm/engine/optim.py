"""An optimizer-wrapper constructor whose ``norm_decay_mult`` reaches every
normalisation layer, also those that a ``custom_keys`` entry matches.

mmengine's ``DefaultOptimWrapperConstructor`` applies none of its other rules
to a parameter a custom key matches; Mask2Former's recipe (Cheng et al., CVPR
2022) scales the backbone's learning rate by a ``'backbone'`` key and wants no
weight decay on any norm, which the Swin configs get by listing every backbone
norm by name. This constructor gets it for any backbone."""
from mmengine.optim import DefaultOptimWrapperConstructor
from mmengine.registry import OPTIM_WRAPPER_CONSTRUCTORS
from torch import nn
from torch.nn.modules.batchnorm import _BatchNorm
from torch.nn.modules.instancenorm import _InstanceNorm

NORM_LAYERS = (_BatchNorm, _InstanceNorm, nn.GroupNorm, nn.LayerNorm)


@OPTIM_WRAPPER_CONSTRUCTORS.register_module()
class NormDecayOptimWrapperConstructor(DefaultOptimWrapperConstructor):
    """``DefaultOptimWrapperConstructor``, except that ``paramwise_cfg.norm_decay_mult``
    sets the weight decay of the parameters of every norm layer (BatchNorm,
    InstanceNorm, GroupNorm, LayerNorm), whether or not a custom key matched them;
    a custom key still sets their learning rate."""

    def add_params(self, params, module, prefix='', is_dcn_module=None) -> None:
        first = len(params)
        super().add_params(params, module, prefix=prefix, is_dcn_module=is_dcn_module)
        mult = self.paramwise_cfg.get('norm_decay_mult')
        if mult is None or self.base_wd is None or not isinstance(module, NORM_LAYERS):
            return
        own = {id(p) for p in module.parameters(recurse=False)}
        for group in params[first:]:
            if any(id(p) in own for p in group['params']):
                group['weight_decay'] = self.base_wd * mult
