# What the QuadTree-B fragments share: the official dense attention (top-k [32] * 4, ReLU
# value branches), drop path 0.1 and the four stage outputs.
backbone = dict(type='QuadTree', attn_type='B', topks=[32, 32, 32, 32], value_branch_act='ReLU',
                drop_path_rate=0.1, out_indices=(0, 1, 2, 3))
