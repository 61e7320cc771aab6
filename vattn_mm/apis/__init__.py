"""Inference with vattn-mm's models, as mmdet's and mmpretrain's ``apis``:
:func:`infer` runs a trained detector, segmentor or classifier (its config
and checkpoint) on a picture or a folder of pictures and writes the pictures
drawn and the predictions as JSON (``tools/infer.py`` is its command line)::

    from vattn_mm.apis import infer
    out_dir = infer('configs/demo/pvtv2_b0_maskrcnn_demo.py', 'iter_9.pth', 'photo.jpg')
    # the backbone and neck in onnxruntime (CPU), the heads in PyTorch
    out_dir = infer(config, checkpoint, 'photo.jpg', backend='onnxruntime')

mmdet, mmseg and mmpretrain are imported only when a config of theirs runs.
"""
from .inference import INDEX, infer
from .predictors import BACKENDS, fitting_checkpoint
from .tasks import TASKS, InferError, task_scope

__all__ = ['BACKENDS', 'INDEX', 'InferError', 'TASKS', 'fitting_checkpoint', 'infer', 'task_scope']
