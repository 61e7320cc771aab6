# What the FocalNet fragments share: the four stage outputs; the dense variants' focal
# windows are 9 (the ImageNet 3x3 kernels are zero-padded on loading). Each fragment's drop
# path is FocalNet's detection value; its segmentation configs use 0.3.
backbone = dict(type='FocalNet', out_indices=(0, 1, 2, 3))
