"""EANet's external attention and CPVT's PEG: the official modules' outputs
(golden fixtures), gradients and odd sizes against literal references
written here from the official state dicts, TokenPyramid wiring, errors."""
import pytest
import torch
import torch.nn.functional as F

from vattn_mm.backbones import TokenPyramid
from vattn_mm.layers import MIXERS, PEG, ExternalAttention, map_to_tokens, tokens_to_map

from ..golden import GOLDEN, assert_outputs_match, load_fixture, official_arch

MICRO = dict(embed_dims=[16, 32, 48, 64], num_heads=[1, 2, 3, 4], mlp_ratios=[2, 2, 2, 2],
             depths=[1, 2, 1, 1])


def case(name: str) -> dict:
    return load_fixture(GOLDEN / 'mixers' / f'{name}.pt')


def as_double(sd: dict) -> dict:
    return {k: v.double() if v.is_floating_point() else v for k, v in sd.items()}


# ----------------------------------------------------------- literal references
def literal_eamlp(sd: dict, x: torch.Tensor, num_heads: int) -> torch.Tensor:
    """Official EAMLP ``Attention`` written out head by head, softmax spelled
    with exp / sum."""
    t = x @ sd['trans_dims.weight'].T + sd['trans_dims.bias']
    heads = 4 * num_heads
    d = t.shape[-1] // heads
    outs = []
    for h in range(heads):
        logits = t[..., h * d:(h + 1) * d] @ sd['linear_0.weight'].T + sd['linear_0.bias']
        e = torch.exp(logits - logits.max(dim=1, keepdim=True).values)  # over tokens
        a = e / e.sum(dim=1, keepdim=True)
        a = a / (1e-9 + a.sum(dim=2, keepdim=True))                    # over slots
        outs.append(a @ sd['linear_1.weight'].T + sd['linear_1.bias'])
    return torch.cat(outs, dim=-1) @ sd['proj.weight'].T + sd['proj.bias']


def literal_ea_seg(sd: dict, x: torch.Tensor, tied: bool = True) -> torch.Tensor:
    """Official ``External_attention`` (eval BN) on a (B, c, H, W) map.

    ``tied``: as the official module computes after loading ``sd``: its two
    memories share storage, so ``linear_1`` (loaded last) is both."""
    b, c, h, w = x.shape
    memory_v = sd['linear_1.weight'][:, :, 0]                          # (c, k)
    memory_k = memory_v.T if tied else sd['linear_0.weight'][:, :, 0]
    y = torch.einsum('oc,bchw->bohw', sd['conv1.weight'][:, :, 0, 0], x)
    y = (y + sd['conv1.bias'][:, None, None]).reshape(b, c, h * w)
    logits = torch.einsum('kc,bcn->bkn', memory_k, y)
    e = torch.exp(logits - logits.max(dim=2, keepdim=True).values)
    a = e / e.sum(dim=2, keepdim=True)
    a = a / (1e-9 + a.sum(dim=1, keepdim=True))
    y = torch.einsum('ck,bkn->bcn', memory_v, a).reshape(b, c, h, w)
    y = torch.einsum('oc,bchw->bohw', sd['conv2.0.weight'][:, :, 0, 0], y)
    scale = sd['conv2.1.weight'] / torch.sqrt(sd['conv2.1.running_var'] + 1e-5)
    y = (y - sd['conv2.1.running_mean'][:, None, None]) * scale[:, None, None] \
        + sd['conv2.1.bias'][:, None, None]
    return torch.relu(y + x)


def literal_peg(sd: dict, x: torch.Tensor, hw) -> torch.Tensor:
    """Official ``PosCNN`` (s=1): tokens + depthwise 3x3 conv, by shifts."""
    b, n, c = x.shape
    h, w = hw
    m = x.transpose(1, 2).reshape(b, c, h, w)
    padded = F.pad(m, (1, 1, 1, 1))
    wgt = sd['proj.0.weight'][:, 0]
    out = m + sd['proj.0.bias'][:, None, None]
    for i in range(3):
        for j in range(3):
            out = out + wgt[:, i, j][:, None, None] * padded[:, :, i:i + h, j:j + w]
    return out.reshape(b, c, n).transpose(1, 2)


def official_ea_seg_output(mixer: ExternalAttention, x: torch.Tensor) -> torch.Tensor:
    """The official seg module's full output from our mixer: its own
    residual and ReLU wrapped around the mixer's branch."""
    tokens, hw = map_to_tokens(x)
    return torch.relu(x + tokens_to_map(mixer(tokens, hw), hw))


# ------------------------------------------------------------- golden fixtures
def test_external_attention_multi_head_equals_official():
    rec = case('external_attention_mh')
    mixer = ExternalAttention.from_official(rec['checkpoint'], **official_arch(rec)).eval()
    assert (mixer.heads, mixer.head_dims) == (8, 16)
    with torch.no_grad():
        out = mixer(rec['input'], (5, 10))       # 50 tokens; any (H, W) with H * W = 50
    assert_outputs_match([out], rec['outputs'])


def test_external_attention_seg_module_equals_official():
    rec = case('external_attention')
    mixer = ExternalAttention.from_official(rec['checkpoint'], **official_arch(rec)).eval()
    assert isinstance(mixer.norm, torch.nn.BatchNorm2d) and mixer.proj.bias is None
    with torch.no_grad():
        out = official_ea_seg_output(mixer, rec['input'])
        literal = literal_ea_seg(rec['checkpoint'], rec['input'])
    assert_outputs_match([out], rec['outputs'])
    assert_outputs_match([literal], rec['outputs'])   # the literal reference is the official one
    # the fixture's linear_0 entry (perturbed apart from linear_1) never reaches the output
    with torch.no_grad():
        untied = literal_ea_seg(rec['checkpoint'], rec['input'], tied=False)
    assert (untied - rec['outputs'][0]).abs().max() > 0.1


def test_peg_equals_official():
    rec = case('cpvt_peg')
    peg = PEG.from_official(rec['checkpoint'], **official_arch(rec))
    x, hw = rec['input'], (rec['forward_kwargs']['H'], rec['forward_kwargs']['W'])
    with torch.no_grad():
        out = x + peg(x, hw)                      # PEG returns the term, the skeleton adds it
    assert_outputs_match([out], rec['outputs'])
    assert_outputs_match([literal_peg(rec['checkpoint'], x, hw)], rec['outputs'])


# ------------------------------------------------ gradients and sizes, literal refs
def grads_match(ours, theirs, our_params: dict, official_sd: dict, key_map: dict,
                inputs, tol: float = 1e-9):
    """Forward and d/d(input, every parameter) of ``sum(out * g)`` agree;
    the official biases we leave out get no gradient."""
    assert (ours - theirs).abs().max() <= tol * max(1., theirs.abs().max().item())
    g = torch.randn_like(theirs)
    (ours * g).sum().backward()
    (theirs * g).sum().backward()
    ours_in, theirs_in = inputs
    torch.testing.assert_close(ours_in.grad, theirs_in.grad, rtol=tol, atol=tol)
    for official_key, our_key in key_map.items():
        expected = official_sd[official_key].grad.reshape(our_params[our_key].shape)
        torch.testing.assert_close(our_params[our_key].grad, expected, rtol=tol, atol=tol,
                                   msg=lambda m: f'{our_key}: {m}')
    for key in CANCELLED_BIASES & set(official_sd):
        assert official_sd[key].grad.abs().max() <= tol, key


# official biases the softmax over tokens cancels; ours leaves them out
CANCELLED_BIASES = {'trans_dims.bias', 'linear_0.bias', 'conv1.bias'}
MH_KEYS = {'trans_dims.weight': 'in_proj.weight', 'linear_0.weight': 'memory_k.weight',
           'linear_1.weight': 'memory_v.weight', 'linear_1.bias': 'memory_v.bias',
           'proj.weight': 'proj.weight', 'proj.bias': 'proj.bias'}
SEG_KEYS = {'conv1.weight': 'in_proj.weight', 'conv2.0.weight': 'proj.weight',
            'conv2.1.weight': 'norm.weight', 'conv2.1.bias': 'norm.bias'}


# the official modules accept any size too; these include 1x1 and 1-wide maps
@pytest.mark.parametrize('hw', [(7, 5), (1, 1), (3, 1), (10, 5)])
def test_external_attention_multi_head_gradients_and_sizes(hw):
    rec = case('external_attention_mh')
    sd = {k: v.clone().requires_grad_() for k, v in as_double(rec['checkpoint']).items()}
    mixer = ExternalAttention.from_official(sd, **official_arch(rec)).double()
    x = torch.randn(2, hw[0] * hw[1], 32, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grads_match(mixer(x, hw), literal_eamlp(sd, x_ref, num_heads=2),
                dict(mixer.named_parameters()), sd, MH_KEYS, (x, x_ref))


@pytest.mark.parametrize('hw', [(12, 16), (7, 5), (1, 3)])
def test_external_attention_seg_gradients_and_sizes(hw):
    rec = case('external_attention')
    sd = {k: v.clone().requires_grad_(v.is_floating_point())
          for k, v in as_double(rec['checkpoint']).items()}
    mixer = ExternalAttention.from_official(sd, c=64).double().eval()
    x = torch.randn(2, 64, *hw, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grads_match(official_ea_seg_output(mixer, x), literal_ea_seg(sd, x_ref),
                dict(mixer.named_parameters()), sd, SEG_KEYS, (x, x_ref))
    # the tied memory gets the gradients of both its uses
    assert mixer.memory_v is None
    torch.testing.assert_close(mixer.memory_k.weight.grad, sd['linear_1.weight'].grad[:, :, 0].T,
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize('hw', [(14, 18), (5, 7), (1, 4)])
def test_peg_gradients_and_sizes(hw):
    rec = case('cpvt_peg')
    sd = {k: v.clone().requires_grad_() for k, v in as_double(rec['checkpoint']).items()}
    peg = PEG.from_official(sd, in_chans=32, embed_dim=32).double()
    x = torch.randn(2, hw[0] * hw[1], 32, dtype=torch.float64, requires_grad=True)
    x_ref = x.detach().clone().requires_grad_()
    grads_match(x + peg(x, hw), literal_peg(sd, x_ref, hw), dict(peg.named_parameters()), sd,
                {'proj.0.weight': 'weight', 'proj.0.bias': 'bias'}, (x, x_ref))


@pytest.mark.parametrize('name', ['external_attention_mh', 'external_attention'])
def test_official_input_and_memory_biases_never_reach_the_output(name):
    rec = case(name)
    sd, x = rec['checkpoint'], rec['input']
    moved = {k: v + 3 * torch.randn_like(v) if k in CANCELLED_BIASES else v
             for k, v in sd.items()}
    literal = literal_ea_seg if name == 'external_attention' else \
        lambda sd, x: literal_eamlp(sd, x, num_heads=2)
    torch.testing.assert_close(literal(moved, x), literal(sd, x), rtol=1e-5, atol=1e-5)
    assert not CANCELLED_BIASES.isdisjoint(sd)
    assert not {'in_proj.bias', 'memory_k.bias'} & set(
        ExternalAttention.convert_official_state_dict(sd))


def test_external_attention_normalises_over_tokens_then_slots():
    mixer = ExternalAttention(32, num_heads=2)
    x = torch.randn(2, 35, 32)
    a = mixer.slot_weights(x)                               # (B, N, heads, S)
    assert a.shape == (2, 35, 8, 64)
    torch.testing.assert_close(a.sum(-1), torch.ones(2, 35, 8))
    # dividing by the slot sums leaves each slot's column proportional to its softmax
    logits = mixer.memory_k(mixer.in_proj(x).view(2, 35, 8, 16))
    ratio = a / logits.softmax(dim=1)
    torch.testing.assert_close(ratio, ratio[..., :1].expand_as(ratio))


def test_external_attention_layer_norm_option_normalises_tokens():
    mixer = ExternalAttention(16, norm_cfg=dict(type='LN'))
    out = mixer(torch.randn(2, 12, 16), (3, 4))
    torch.testing.assert_close(out.mean(-1), torch.zeros(2, 12), atol=1e-5, rtol=0)


# ------------------------------------------------------------------ TokenPyramid
def test_external_attention_in_every_stage_of_a_pyramid():
    assert MIXERS['ExternalAttention'] is ExternalAttention
    model = TokenPyramid(MICRO, mixer=dict(type='ExternalAttention'), drop_path_rate=0.)
    assert [s.blocks[0].attn.heads for s in model.stages] == [4, 8, 12, 16]
    assert [s.blocks[0].attn.head_dims for s in model.stages] == [16, 16, 16, 16]
    assert model.size_multiple == 1                          # no padding


def test_peg_once_per_stage_after_the_first_block():
    model = TokenPyramid(MICRO, mixer=dict(type='ExternalAttention'),
                         position=dict(type='PEG'), drop_path_rate=0.).eval()
    calls = []
    for i, stage in enumerate(model.stages):
        assert isinstance(stage.position, PEG) and stage.position.kernel_size == (3, 3)
        assert not any(b.has_position for b in stage.blocks)
        stage.position.register_forward_hook(lambda *_, i=i: calls.append(i))
    with torch.no_grad():
        model(torch.randn(1, 3, 64, 96))
    assert calls == [0, 1, 2, 3]

    # stage 1 (two blocks) equals the official composition: block, PosCNN, block
    stage = model.stages[1]
    tokens, hw = stage.patch_embed(torch.randn(1, 16, 16, 24))
    official_sd = {'proj.0.weight': stage.position.weight, 'proj.0.bias': stage.position.bias}
    with torch.no_grad():
        ours = model.run_stage(stage, tokens.clone(), hw)
        expected = stage.blocks[1](literal_peg(official_sd, stage.blocks[0](tokens, hw), hw), hw)
    torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------------ errors
def test_bad_arguments_are_clear_errors():
    with pytest.raises(ValueError, match='embed_dims 30 is not divisible by num_heads 4'):
        ExternalAttention(30, num_heads=4)
    with pytest.raises(ValueError, match='expansion must be an integer >= 1'):
        ExternalAttention(32, expansion=0)
    with pytest.raises(ValueError, match='num_slots must be >= 1'):
        ExternalAttention(32, num_slots=0)
    with pytest.raises(ValueError, match=r'attn_drop must be in \[0, 1\)'):
        ExternalAttention(32, attn_drop=1.)
    with pytest.raises(ValueError, match=r'proj_drop must be in \[0, 1\)'):
        ExternalAttention(32, proj_drop=-0.1)
    with pytest.raises(ValueError, match='tie_memories=True .* needs memory_bias=False'):
        ExternalAttention(32, tie_memories=True)
    mh = case('external_attention_mh')['checkpoint']
    with pytest.raises(KeyError, match='not an official EANet external-attention state dict'):
        ExternalAttention.from_official({'weight': torch.zeros(1)}, dim=32)
    with pytest.raises(KeyError, match="unexpected key 'head.weight'"):
        ExternalAttention.convert_official_state_dict({**mh, 'head.weight': torch.zeros(1)})
    with pytest.raises(TypeError, match="official seg module needs its constructor argument 'c'"):
        ExternalAttention.from_official(case('external_attention')['checkpoint'], dim=64)
    with pytest.raises(TypeError, match=r"unknown official multi_head arguments \['coef'\]"):
        ExternalAttention.from_official(mh, dim=32, num_heads=2, coef=4)
    peg_sd = case('cpvt_peg')['checkpoint']
    with pytest.raises(ValueError, match='only the depthwise stride-1 PosCNN'):
        PEG.from_official(peg_sd, in_chans=32, embed_dim=32, s=2)
    with pytest.raises(KeyError, match="must have exactly the keys"):
        PEG.convert_official_state_dict({'pos_block.0.proj.0.weight': peg_sd['proj.0.weight']})
