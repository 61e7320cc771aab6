# Mask R-CNN + PVTv2-b0 on the embedded demo shapes (tools/make_demo_data.py): trains from
# scratch on the CPU in a few minutes and reports COCO bbox/segm AP.
_base_ = ['../_base_/maskrcnn_demo.py', '../_base_/backbones/pvtv2_b0.py']
model = dict(backbone=dict(_base_.backbone, _delete_=True, drop_path_rate=0.0, init_cfg=None),
             neck=dict(in_channels=_base_.backbone_channels))
# what `make demo` gives, across seeds and CPUs with and without AVX-512 (measured 0.636-0.651
# and 0.692-0.719 over seeds 0-1, AVX-512 and AVX2;
# .dev_scripts/demo_spread.py); tools/summarize_metrics.py prints it beside the result
expected_metrics = {'coco/bbox_mAP': (0.62, 0.66), 'coco/segm_mAP': (0.68, 0.73)}
