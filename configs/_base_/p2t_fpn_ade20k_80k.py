# Semantic FPN on ADE20K as P2T's release trains and tests it (official
# segmentation/configs/sem_fpn_p2t_*_ade20k_80k.py): the fpn_ade20k_80k_8x2 recipe, tested on
# images stretched to sides that are multiples of 32 (P2T's AlignResize).
_base_ = './fpn_ade20k_80k_8x2.py'

test_pipeline = _base_.align_resize_test_pipeline
val_dataloader = dict(dataset=dict(pipeline=test_pipeline))
test_dataloader = val_dataloader
