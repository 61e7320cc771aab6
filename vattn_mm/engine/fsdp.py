"""Sharded training with mmengine's FSDP strategy (configs/_base_/fsdp.py):
``strategy = dict(type='ResumableFSDPStrategy', model_wrapper=dict(
auto_wrap_policy='token_block_wrap_policy', ...))``."""
from __future__ import annotations

from mmengine._strategy import FSDPStrategy
from mmengine.registry import FUNCTIONS, STRATEGIES
from torch import nn
from torch.distributed.fsdp import FullyShardedDataParallel as FSDP
from torch.distributed.fsdp.wrap import transformer_auto_wrap_policy

from ..layers import TokenBlock


@FUNCTIONS.register_module()
def token_block_wrap_policy(module: nn.Module, recurse: bool, nonwrapped_numel: int) -> bool:
    """FSDP auto-wrap policy that makes every :class:`~vattn_mm.layers.TokenBlock`
    (the blocks of all vattn-mm backbones) its own sharded unit; the rest of
    the model (embeddings, norms, neck, heads) forms the root unit.

    A block's parameters are gathered just for its forward and backward, so
    the full weights of only one block at a time exist on a device; with
    ``with_cp=True`` on the backbone the block is gathered again for its
    recomputation in the backward pass.
    """
    return transformer_auto_wrap_policy(module, recurse, nonwrapped_numel,
                                        transformer_layer_cls={TokenBlock})


@STRATEGIES.register_module()
class ResumableFSDPStrategy(FSDPStrategy):
    """mmengine's ``FSDPStrategy`` (same arguments) whose resume loads the
    optimizer state under torch >= 2.1.

    mmengine 0.10.7 calls ``FSDP.optim_state_dict_to_load(state_dict, model,
    optimizer)``, the argument order of torch 2.0; torch 2.1 made it
    ``(model, optimizer, state_dict)`` (pytorch/pytorch#96534), and resuming
    fails with ``TypeError: unhashable type: 'dict'``.
    """

    def load_optim_state_dict(self, state_dict: dict) -> None:
        optimizer = self.optim_wrapper.optimizer
        self.optim_wrapper.load_state_dict(
            FSDP.optim_state_dict_to_load(self.model, optimizer, state_dict))
