"""Every released architecture of every family, at its full widths, with the
default fast paths: the outputs, the input gradient and every parameter
gradient of a training step at an odd input size and batch 2 equal those of
``fast_paths='plain'`` (float32, the tolerance of ``tests/ops/grads.py``).

``make test`` builds each with one block a stage (every width, kernel,
window and head count of the release; the blocks of a stage repeat the same
code), once per distinct model: variants that differ only in depth are the
same model there.  ``make test-extended`` builds every variant at its
released depths."""
import pytest
import torch

from vattn_mm import ops
from vattn_mm.backbones import backbone_class, registered_backbones

from ..ops.grads import assert_grads_match, move_off_init, result_names, weighted_grads

# every released model (FocalNet-H: 0.7 B parameters, about 9 GiB here with both sets of
# gradients): slow, and on one worker, so that two of the largest never run at once
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group('released_models')]

#: odd height and width, batch 2
SIZE, BATCH = (67, 93), 2
RELEASED = [(family, arch) for family in sorted(registered_backbones())
            for arch in backbone_class(family).arch_zoo]


def one_block_a_stage(family: str, arch: str) -> dict:
    """The released ``arch`` of ``family`` with one block in every stage."""
    arch = dict(backbone_class(family).arch_zoo[arch])
    key = 'depths' if 'depths' in arch else 'depth_list'   # EfficientViT's name
    arch[key] = [1] * len(arch[key])
    return arch


def _cases() -> list:
    """Each released variant at its released depths (``extended``), and each
    distinct one-block-a-stage model once (the first variant that gives it)."""
    cases, one_block_models = [], set()
    for family, arch in RELEASED:
        model = (family, repr(sorted(one_block_a_stage(family, arch).items())))
        if model not in one_block_models:
            one_block_models.add(model)
            cases.append(pytest.param(family, arch, 'one block a stage',
                                      id=f'{family}-{arch}-one block a stage'))
        cases.append(pytest.param(family, arch, 'released depths', marks=pytest.mark.extended,
                                  id=f'{family}-{arch}-released depths'))
    return cases


def _step(model, x: torch.Tensor, setting) -> list:
    """Outputs and the gradients of the input and of every parameter of one
    backward under a fixed, uneven weighting of the outputs."""
    x = x.detach().requires_grad_()
    return weighted_grads(ops.configure(model, setting)(x), [x, *model.parameters()])


@pytest.mark.parametrize('family, arch, depths', _cases())
def test_default_fast_paths_give_plain_gradients(family, arch, depths):
    torch.manual_seed(0)
    cls = backbone_class(family)
    if depths == 'one block a stage':
        arch = one_block_a_stage(family, arch)
    model = cls(arch, drop_path_rate=0.).train()
    model.init_weights()
    move_off_init(model)
    assert any(row['on_in_model'] for row in ops.describe(ops.configure(model, None))), \
        f'no fast path is on by default in {family} {arch} on torch {torch.__version__}'
    x = torch.randn(BATCH, 3, *SIZE)
    plain = _step(model, x, 'plain')
    fast = _step(model, x, None)
    names = result_names(len(model.out_indices), model)
    assert_grads_match(fast, plain, names, f'{family} {arch} at {SIZE}, batch {BATCH}')
