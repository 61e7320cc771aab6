# Sharded data-parallel training: PyTorch FSDP (Zhao et al. 2023, arXiv:2304.11277) through
# mmengine's FlexibleRunner and FSDPStrategy (ResumableFSDPStrategy: the same, with the resume
# of the optimizer state fixed for torch >= 2.1). A config inherits its task config and this
# file, and sets
#     runner_type = 'SafeFlexibleRunner'
# itself (the task config's runner_type comes from vattn_runtime.py, and mmengine merges no
# two bases that define the same key). Start it with tools/dist_train.sh CONFIG GPUS.
strategy = dict(
    type='ResumableFSDPStrategy',
    model_wrapper=dict(
        # one FSDP unit per backbone block (vattn_mm.engine.token_block_wrap_policy); the
        # embeddings, neck and heads form the root unit
        auto_wrap_policy='token_block_wrap_policy',
        sharding_strategy='FULL_SHARD',
        # original parameter names and modules: the optimizer constructor's paramwise_cfg
        # (no decay on norms) sees the model as without FSDP
        use_orig_params=True,
        # mixed precision: tools/train.py --amp / --amp-dtype bfloat16 (autocast, sharded
        # gradient scaler); or FSDP's own, e.g. with --cfg-options
        # strategy.model_wrapper.mixed_precision.param_dtype=bfloat16
    ),
    # checkpoints hold the full, unsharded state gathered on rank 0 (on the CPU): ordinary
    # mmengine checkpoints that tools/test.py, a DDP run or another number of processes reads
    state_dict_cfg='full',
)
