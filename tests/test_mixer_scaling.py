"""How each token mixer's cost grows with the number of tokens, on the
single-stage ``Mixer:<name>`` targets the benchmark measures: multiply-adds
and the largest tensor a mixer creates, shape-exact under FakeTensorMode
(no memory, no arithmetic)."""
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from vattn_mm.analysis import build_spec, spec_complexity
from vattn_mm.layers import MIXERS

#: mixers whose papers make them linear in the tokens (global: agents, kernels,
#: external memories; local: windows, dilated neighbourhoods, convolutions)
LINEAR = ('AgentAttention', 'LiteMLA', 'ExternalAttention', 'FocalModulation',
          'ShiftedWindowAttention', 'MultiScaleDilatedAttention')
#: full softmax attention by design (DilateFormer's late stages)
FULL_ATTENTION = ('GlobalSelfAttention', )
SIDES = (512, 1024)   # stage maps of 128x128 and 256x256 tokens


class LargestTensor(TorchDispatchMode):
    """Records the largest tensor any op returns while active."""

    def __init__(self):
        super().__init__()
        self.numel, self.where = 0, ''

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if isinstance(t, torch.Tensor) and t.numel() > self.numel:
                self.numel, self.where = t.numel(), f'{func} -> {tuple(t.shape)}'
        return out


def largest_in_mixer(name: str, side: int) -> LargestTensor:
    """The largest tensor the mixer of ``Mixer:name`` creates on a side x side image."""
    record = LargestTensor()
    with FakeTensorMode():
        model = build_spec(f'Mixer:{name}')
        mixer = model.stages[0].blocks[0].attn
        mixer.register_forward_pre_hook(lambda *_: record.__enter__() and None)
        mixer.register_forward_hook(lambda *_: record.__exit__(None, None, None))
        with torch.no_grad():
            model(torch.randn(1, 3, side, side))
    return record


def test_linear_list_names_mixers():
    assert set(LINEAR + FULL_ATTENTION) <= set(MIXERS)


@pytest.mark.parametrize('name', LINEAR)
def test_linear_mixers_cost_grows_linearly(name):
    small, large = (spec_complexity(f'Mixer:{name}', (s, s)).macs for s in SIDES)
    assert large / small == pytest.approx(4.0, rel=0.02)


@pytest.mark.parametrize('name', sorted(set(MIXERS) - set(FULL_ATTENTION)))
def test_no_mixer_forms_a_tokens_by_tokens_matrix(name):
    """No tensor with N x N entries (N tokens) where the paper avoids one; the
    linear mixers' largest tensor grows like N itself."""
    records = [largest_in_mixer(name, side) for side in SIDES]
    for side, record in zip(SIDES, records):
        tokens = (side // 4) ** 2
        assert record.numel < tokens * tokens / 8, f'{side}x{side}: {record.where}'
    if name in LINEAR:   # (Swin pads 128 -> 133 but 256 -> 259 tokens a side: 3.79x)
        assert records[1].numel / records[0].numel == pytest.approx(4.0, rel=0.06), \
            [r.where for r in records]


def test_mixer_spec_errors_are_clear():
    with pytest.raises(ValueError, match='unknown mixer'):
        build_spec('Mixer:NoSuchAttention')
    with pytest.raises(ValueError, match='no ImageNet classifier'):
        build_spec('Mixer:LiteMLA', imagenet=True)
