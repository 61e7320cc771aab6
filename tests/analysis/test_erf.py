"""vattn_mm.analysis.erf and tools/analysis/erf.py: effective receptive fields
against backbones whose receptive field is known exactly, the area ratio by
hand, the tool end to end and its errors."""
import json

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from vattn_mm.analysis.erf import (ErfModel, Preprocess, area_ratios, compute_erf, config_model,
                                   display_map, folder_images, procedural_images)
from vattn_mm.backbones import TokenPyramid

from ..tools import load_tool

TOOL = load_tool('analysis/erf.py')
#: inputs as they are: 0-255 images, so the linear stacks' outputs stay positive
IDENTITY = Preprocess(mean=(0., 0., 0.), std=(1., 1., 1.))


class ConvStack(nn.Module):
    """Stages of ``depth`` linear 3x3 convolutions (stride 1, zero padding)
    with all-one weights: stage ``s``'s central output depends on the input
    pixels within ``depth * (s + 1)`` of the centre, with the weight of the
    n-fold convolution of ``[1, 1, 1]`` with itself along each axis."""

    def __init__(self, num_stages: int = 2, depth: int = 1):
        super().__init__()
        self.num_stages, self.out_indices = num_stages, tuple(range(num_stages))
        self.stages = nn.ModuleList(
            nn.Sequential(*[nn.Conv2d(3, 3, 3, padding=1, bias=False) for _ in range(depth)])
            for _ in range(num_stages))
        for param in self.parameters():
            nn.init.ones_(param)

    def forward(self, x):
        outs = []
        for i, stage in enumerate(self.stages[:max(self.out_indices) + 1]):
            x = stage(x)
            if i in self.out_indices:
                outs.append(x)
        return tuple(outs)


def convolved_ones(n: int) -> np.ndarray:
    row = np.ones(1)
    for _ in range(n):
        row = np.convolve(row, np.ones(3))
    return np.outer(row, row)


def one_stage(mixer, depth: int = 1) -> TokenPyramid:
    """Stage 0 of a TokenPyramid: 7x7 stride-4 overlapping embedding, then
    ``depth`` blocks of ``mixer`` + ConvFFN (3x3 depthwise)."""
    torch.manual_seed(0)
    model = TokenPyramid(dict(embed_dims=[16], depths=[depth], num_heads=[1], mlp_ratios=[2]),
                         mixer=[mixer], drop_path_rate=0., out_indices=(0, ))
    model.init_weights()
    return model


def images(num: int, size: int):
    return procedural_images(num, size, seed=0)


@pytest.mark.parametrize('stage, depth', [(0, 1), (1, 1), (1, 2)])
def test_linear_conv_stack_has_its_theoretical_field(stage, depth):
    erf = compute_erf(ErfModel('stack', ConvStack(2, depth), IDENTITY, 'ones'), stage,
                      images(2, 17))
    radius = depth * (stage + 1)
    expected = np.zeros((17, 17))
    expected[8 - radius:9 + radius, 8 - radius:9 + radius] = convolved_ones(radius)
    np.testing.assert_allclose(erf.contribution / erf.contribution.max(),
                               expected / expected.max(), rtol=1e-6, atol=0)
    assert erf.num_images == 2 and erf.stage == stage
    assert erf.centroid == pytest.approx((8, 8))


def test_area_ratio_by_hand():
    """One 3x3 conv on 9x9: the display map is 1 on the central 3x3 and 0
    elsewhere; the centre pixel holds 1/9 of it."""
    erf = compute_erf(ErfModel('stack', ConvStack(1), IDENTITY, 'ones'), 0, images(1, 9))
    expected = np.zeros((9, 9))
    expected[3:6, 3:6] = 1
    np.testing.assert_allclose(erf.display, expected)
    ratios = erf.area_ratios((0.1, 0.2, 0.99))
    assert [(r.side, r.ratio) for r in ratios] == [(1, 1 / 81), (3, 9 / 81), (3, 9 / 81)]
    # squares reaching past the map are clipped: a 4x6 map's centre is (2, 3); side 3
    # holds 3x3 of its 24 pixels, side 5 rows 0-3 x columns 1-5, side 7 all
    flat = area_ratios(np.ones((4, 6)), (0.3, 0.5, 0.99))
    assert [(r.side, r.ratio) for r in flat] == [(3, 9 / 24), (5, 20 / 24), (7, 1.0)]
    with pytest.raises(ValueError, match=r'\(0, 1\)'):
        area_ratios(expected, (1.0, ))


def test_relu_keeps_positive_contributions_only():
    """RepLKNet's two ReLUs: of the central output (a negative one contributes
    nothing) and of the input gradient (``abs`` keeps its magnitude)."""
    stack = ConvStack(1)
    with torch.no_grad():
        stack.stages[0][0].weight[:, :, 1, 1] = -1   # a flat image still gives 8 - 1 > 0
    flat = [np.full((9, 9, 3), 100, np.uint8)]
    model = ErfModel('stack', stack, IDENTITY, 'ones')
    relu, magnitude = (compute_erf(model, 0, flat, gradient=g).contribution
                       for g in ('relu', 'abs'))
    ring = np.zeros((9, 9), bool)
    ring[3:6, 3:6] = True
    ring[4, 4] = False
    assert relu[4, 4] == 0 and magnitude[4, 4] == magnitude[3, 3] > 0
    np.testing.assert_array_equal(relu[ring], magnitude[ring])
    with torch.no_grad():
        stack.stages[0][0].weight.fill_(-1)
    with pytest.raises(ValueError, match='zero contribution everywhere'):
        compute_erf(model, 0, flat)


def test_display_map_is_log_scaled_to_one():
    np.testing.assert_allclose(display_map(np.array([[0., 9.], [99., 999.]])),
                               [[0., 1 / 3], [2 / 3, 1.]])


@pytest.mark.parametrize('depth', [1, 2])
def test_local_token_pyramid_stage_is_zero_outside_its_field(depth):
    """A 64x64 input gives 16x16 tokens, the central one at 8: each block's
    depthwise 3x3 adds one token on each side, the embedding 3 pixels."""
    model = ErfModel('ffn only', one_stage(None, depth), Preprocess(), 'random')
    erf = compute_erf(model, 0, images(1, 64), gradient='abs')
    low, high = 4 * (8 - depth) - 3, 4 * (8 + depth) + 3
    support = np.zeros((64, 64), bool)
    support[low:high + 1, low:high + 1] = True
    assert (erf.contribution[~support] == 0).all()
    assert (erf.contribution[support] > 0).all()
    # token i of the stride-4 embedding (7x7, padding 3) is centred on pixel 4 i
    assert erf.centroid == pytest.approx((32, 32), abs=1.5)


def test_global_attention_reaches_every_pixel_and_ratios_grow():
    model = ErfModel('global', one_stage(dict(type='GlobalSelfAttention')), Preprocess(), 'random')
    erf = compute_erf(model, -1, images(2, 32), gradient='abs')
    assert (erf.contribution > 0).all()
    ratios = erf.area_ratios((0.1, 0.2, 0.3, 0.5, 0.9, 0.99))
    assert all(a.side <= b.side and a.ratio <= b.ratio for a, b in zip(ratios, ratios[1:]))
    assert ratios[0].ratio < ratios[-1].ratio <= 1


def test_backbone_state_is_restored_and_stage_checked():
    backbone = ConvStack(2)
    backbone.stages[0][0].weight.requires_grad_(False)
    model = ErfModel('stack', backbone, IDENTITY, 'ones')
    compute_erf(model, 0, images(1, 9))
    assert backbone.training and backbone.out_indices == (0, 1)
    assert [p.requires_grad for p in backbone.parameters()] == [False, True]
    with pytest.raises(ValueError, match=r'stage 2 out of range: ConvStack has 2 stages \(0-1'):
        compute_erf(model, 2, images(1, 9))
    with pytest.raises(TypeError, match='exposes no stages'):
        compute_erf(ErfModel('conv', nn.Conv2d(3, 3, 3), IDENTITY, ''), 0, images(1, 9))
    with pytest.raises(ValueError, match='gradient must be one of'):
        compute_erf(model, 0, images(1, 9), gradient='square')


def test_preprocess_follows_the_data_preprocessor():
    image = np.zeros((2, 2, 3), np.uint8)
    image[..., 0] = 255
    bgr = Preprocess.from_config(dict(mean=[0, 0, 0], std=[255, 255, 255], bgr_to_rgb=False))
    assert bgr([image])[0, :, 0, 0].tolist() == [0., 0., 1.]
    assert Preprocess.from_config(dict(size=(512, 512))) == Preprocess()
    rgb = Preprocess.from_config(dict(mean=[255, 0, 0], std=[1, 1, 1], to_rgb=True))
    assert rgb([image]).abs().max() == 0


BARE_CONFIG = """backbone = dict(type='TokenPyramid', arch=dict(embed_dims=[16, 32], depths=[1, 1],
                num_heads=[1, 1], mlp_ratios=[2, 2]), drop_path_rate=0., out_indices=(0, 1))
"""


def test_config_backbones_and_their_errors(tmp_path):
    nested = tmp_path / 'seg.py'
    nested.write_text("model = dict(type='EncoderDecoder', data_preprocessor=dict(mean=[1, 2, 3], "
                      "std=[4, 5, 6], bgr_to_rgb=True),\n    " + BARE_CONFIG.replace('\n', '\n    ')
                      + ")\n")
    model = config_model(str(nested))
    assert isinstance(model.backbone, TokenPyramid) and model.weights == 'random init'
    assert model.preprocess == Preprocess((1, 2, 3), (4, 5, 6), True)
    empty = tmp_path / 'empty.py'
    empty.write_text('model = dict(type="EncoderDecoder")\n')
    with pytest.raises(ValueError, match='has no backbone'):
        config_model(str(empty))
    with pytest.raises(FileNotFoundError, match='config file not found'):
        config_model(str(tmp_path / 'missing.py'))
    with pytest.raises(FileNotFoundError, match='image folder not found'):
        folder_images(str(tmp_path / 'nowhere'), 32)
    with pytest.raises(ValueError, match='holds no images'):
        folder_images(str(tmp_path), 32)


def test_tool_end_to_end(tmp_path, capsys):
    """A bare backbone config on a folder of real images with a checkpoint
    from another seed: the ERF is the checkpoint's; files, table, errors."""
    config = tmp_path / 'bare.py'
    config.write_text(BARE_CONFIG)
    pictures = tmp_path / 'pictures'
    pictures.mkdir()
    for i, image in enumerate(procedural_images(2, 40)):
        Image.fromarray(image).save(pictures / f'{i}.png')
    torch.manual_seed(1)
    trained = config_model(str(config))
    torch.save({'state_dict': {f'backbone.{k}': v for k, v in trained.backbone.state_dict().items()}},
               tmp_path / 'ckpt.pth')
    out = tmp_path / 'out'
    args = [str(config), '--stage', '1', '--images', str(pictures), '--num-images', '5',
            '--size', '32', '--out', str(out), '--figure', str(tmp_path / 'docs' / 'fig.png')]
    assert TOOL.main(args + ['--checkpoint', str(tmp_path / 'ckpt.pth')]) == 0
    assert (out / 'erf.png').stat().st_size > 0 and (tmp_path / 'docs' / 'fig.png').is_file()
    report = json.loads((out / 'erf.json').read_text())
    assert report['weights'] == {'bare': str(tmp_path / 'ckpt.pth')}
    entry, = report['models']
    assert entry['stage'] == 1 and entry['num_images'] == 2
    saved = np.load(out / 'erf.npz')['bare']
    expected = compute_erf(trained, 1, folder_images(str(pictures), 32))
    np.testing.assert_allclose(saved, expected.contribution, rtol=1e-5)
    assert [r['ratio'] for r in entry['area_ratios']] == pytest.approx(
        [r.ratio for r in area_ratios(display_map(saved))])
    assert '| bare | 1 |' in capsys.readouterr().out

    assert TOOL.main([str(config), '--stage', '2', '--size', '32', '--out', str(out)]) == 2
    assert 'stage 2 out of range' in capsys.readouterr().err
    torch.save({'state_dict': {'backbone.other': torch.zeros(1)}}, tmp_path / 'bad.pth')
    assert TOOL.main(args + ['--checkpoint', str(tmp_path / 'bad.pth')]) == 2
    assert 'does not fit TokenPyramid' in capsys.readouterr().err
    for bad, message in [([], 'at least one model'),
                         ([str(config), str(config), '--checkpoint', 'x.pth'], 'one model'),
                         ([str(config), '--images', str(tmp_path / 'none')], 'no such folder')]:
        with pytest.raises(SystemExit):
            TOOL.main(bad)
        assert message in capsys.readouterr().err
