# RetinaNet on COCO 1x single-scale as LITv2's release trains it (official
# detection/configs/litv2/retinanet_litv2_s_fpn_1x_coco.py): AdamW lr 1e-4 wd 1e-4, 12 epochs,
# steps at 8 and 11, 1333x800, 8 GPUs x 2 images, float16 mixed precision (apex O1); unlike
# its Mask R-CNN config, the official paramwise_cfg here has no custom_keys (mmcv ignores it),
# so norms keep their weight decay.
_base_ = './retinanet_coco_1x.py'

optim_wrapper = dict(type='AmpOptimWrapper', dtype='float16', loss_scale='dynamic')
