# Mask2Former on ADE20K 512x512, 160k iterations, mmseg's recipe (mmseg configs/
# mask2former/mask2former_swin-t_8xb2-160k_ade20k-512x512.py, after
# facebookresearch/Mask2Former): 100 queries, AdamW lr 1e-4 wd 0.05 with the backbone's lr
# x0.1, no weight decay on norms and on the query / level embeddings, gradient clipping at
# 0.01, poly decay (power 0.9), 16 images/batch (8 GPUs x 2). Swin's config names every
# backbone norm to keep its weight decay at 0 under the backbone's lr key;
# NormDecayOptimWrapperConstructor does that for any backbone. A backbone config adds its
# backbone and decode_head.in_channels (its four stage outputs, strides 4-32).
_base_ = ['mmseg::mask2former/mask2former_r50_8xb2-160k_ade20k-512x512.py',
          './vattn_protections.py']

# mmseg's Mask2Former head is built from mmdet's modules
custom_imports = dict(imports=['mmdet.models', 'vattn_mm'], allow_failed_imports=False)
optim_wrapper = dict(constructor='NormDecayOptimWrapperConstructor')
