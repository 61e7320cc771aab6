# Mask2Former + FocalNet-T (LRF), ADE20K 512x512, 160k iterations, mmseg's Mask2Former recipe
# (mask2former_ade20k_160k.py) with FocalNet's segmentation drop path 0.3. FocalNet's
# Mask2Former runs are of FocalNet-L (3-4 focal levels); the tiny one here is LRF too.
_base_ = ['./_base_/mask2former_ade20k_160k.py', './_base_/backbones/focalnet_t_lrf.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.3),
             decode_head=dict(in_channels=_base_.backbone_channels))
