"""vattn_mm.apis.infer and its command line tools/infer.py end to end:
demo-trained Mask R-CNN, UperNet and ImageClassifier on a real photograph
(matplotlib's sample picture) and a demo image, whose JSON equals the model's
own ``test_step`` on the test set's sample; the backbone and neck in
onnxruntime (exported once, cached) giving PyTorch's predictions; folders, a
URL checkpoint, and bad input failing clearly with nothing written."""
import contextlib
import importlib.util
import io
import json
import shutil
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from mmengine.config import Config
from mmengine.registry import MODELS, DefaultScope
from mmengine.runner import Runner

from vattn_mm.apis import InferError, infer, task_scope
from vattn_mm.apis.inference import output_names, resolve_device
from vattn_mm.utils import UntrustedCheckpointError, load_checkpoint_file
from vattn_mm.utils.atomic_io import current_umask

from ..http_server import FileServer
from ..engine.test_training import CLS_DEMO, DET_DEMO, SEG_DEMO, run_tool
from ..tools import load_tool

#: slow (the Inferencers on trained demo models)
pytestmark = pytest.mark.slow

#: where each demo config's test set lies in the demo data
TEST_ROOTS = {DET_DEMO: 'coco/', SEG_DEMO: 'ade/', CLS_DEMO: 'cls'}

infer_tool = load_tool('infer.py')


def photograph() -> Path:
    """A real photograph a pip package ships (matplotlib's Grace Hopper)."""
    from matplotlib import cbook
    return Path(cbook.get_sample_data('grace_hopper.jpg', asfileobj=False))


def checkpoint_of(work: Path) -> str:
    return (work / 'last_checkpoint').read_text().strip()


def reference_prediction(config: str, checkpoint: str, demo_data: Path):
    """The first test sample of ``config`` on the demo data, through the
    config's test dataloader and ``model.test_step`` (what tools/test.py
    computes): ``(img_path, data sample)``."""
    cfg = Config.fromfile(config)
    loader = cfg.test_dataloader
    loader.update(batch_size=1, num_workers=0, persistent_workers=False)
    loader.dataset.data_root = f'{demo_data}/{TEST_ROOTS[config]}'
    with DefaultScope.overwrite_default_scope(cfg.default_scope):
        model = MODELS.build(cfg.model)
        model.load_state_dict(load_checkpoint_file(checkpoint)['state_dict'])
        model.eval()
        batch = next(iter(Runner.build_dataloader(loader)))
        with torch.no_grad():
            sample = model.test_step(batch)[0]
    return Path(sample.img_path), sample


def image_folder(directory: Path, *images: Path) -> Path:
    directory.mkdir()
    for image in images:
        shutil.copy(image, directory / image.name)
    return directory




def read_outputs(out: Path) -> dict:
    """``image file name -> (prediction JSON, picture)``, every file of the
    index checked to exist and decode."""
    index = json.loads((out / 'infer.json').read_text())
    outputs = {}
    for entry in index['images']:
        pred = json.loads((out / entry['json']).read_text())
        assert pred['image'] == entry['image']
        vis = cv2.imread(str(out / entry['vis']))
        assert vis is not None and vis.ndim == 3, entry
        outputs[Path(entry['image']).name] = (pred, vis)
    assert sorted(p.name for p in (out / 'vis').iterdir()) == sorted(
        Path(e['vis']).name for e in index['images'])
    return outputs


def image_shape(path: Path) -> tuple:
    return cv2.imread(str(path)).shape[:2]


@pytest.fixture(scope='module')
def det_run(demo_trained, demo_data, tmp_path_factory):
    """The Mask R-CNN demo on the photograph and a demo image through the
    command line's ``main`` (its progress bar and last line captured)."""
    checkpoint = checkpoint_of(demo_trained(DET_DEMO))
    demo_image, sample = reference_prediction(DET_DEMO, checkpoint, demo_data)
    tmp = tmp_path_factory.mktemp('infer_det')
    folder = image_folder(tmp / 'images', photograph(), demo_image)
    stdout = io.StringIO()
    with contextlib.redirect_stdout(stdout):
        infer_tool.main([DET_DEMO, checkpoint, str(folder), '--out-dir', str(tmp / 'out'),
                         '--device', 'cpu'])
    return tmp / 'out', stdout.getvalue(), demo_image, sample


def test_detection_on_a_photograph_and_a_demo_image(det_run):
    out, stdout, demo_image, sample = det_run
    assert '] 2/2, ' in stdout  # mmengine's progress bar
    assert stdout.endswith(f'\npictures in {out}/vis, predictions in {out}/preds, '
                           f'index {out}/infer.json\n')
    assert oct(out.stat().st_mode & 0o777) == oct(0o777 & ~current_umask())  # not mkdtemp's
    outputs = outputs_of_both(out, demo_image)
    assert json.loads((out / 'infer.json').read_text())['task'] == 'detection'
    for name, (pred, vis) in outputs.items():
        height, width = image_shape(Path(pred['image']))
        assert vis.shape[:2] == (height, width)
        n = len(pred['labels'])
        assert n > 0 and len(pred['scores']) == len(pred['bboxes']) == len(pred['masks']) == n
        assert set(pred['classes']) <= {'circle', 'triangle', 'square', 'star'}
        boxes = np.array(pred['bboxes'])
        assert boxes.shape == (n, 4) and (boxes[:, 2:] >= boxes[:, :2]).all()
        assert all(m['size'] == [height, width] for m in pred['masks'])
    # the demo image: the JSON is the model's own prediction on that test sample
    pred, _ = outputs[demo_image.name]
    inst = sample.pred_instances
    assert pred['labels'] == inst.labels.tolist()
    np.testing.assert_allclose(pred['scores'], inst.scores.numpy(), rtol=0, atol=1e-6)
    np.testing.assert_allclose(pred['bboxes'], inst.bboxes.numpy(), rtol=0, atol=1e-4)
    from pycocotools import mask as mask_utils
    decoded = np.stack([mask_utils.decode(m) for m in pred['masks']], 0).astype(bool)
    assert np.array_equal(decoded, inst.masks.numpy())


def photograph_and_demo_image_run(config: str, checkpoint: str, demo_data: Path,
                                  tmp: Path) -> tuple:
    """``tools/infer.py`` on the photograph and a demo image: the output
    folder, that demo image and the model's own prediction for it."""
    demo_image, sample = reference_prediction(config, checkpoint, demo_data)
    folder = image_folder(tmp / 'images', photograph(), demo_image)
    return infer(config, checkpoint, folder, tmp / 'out'), demo_image, sample


def outputs_of_both(out: Path, demo_image: Path) -> dict:
    """:func:`read_outputs`, checked to hold the photograph and the demo image."""
    outputs = read_outputs(out)
    assert set(outputs) == {'grace_hopper.jpg', demo_image.name}
    return outputs


@pytest.fixture(scope='module')
def seg_run(demo_trained, demo_data, tmp_path_factory):
    return photograph_and_demo_image_run(SEG_DEMO, checkpoint_of(demo_trained(SEG_DEMO)),
                                         demo_data, tmp_path_factory.mktemp('infer_seg'))


def test_semantic_segmentation_on_a_photograph_and_a_demo_image(seg_run):
    out, demo_image, sample = seg_run
    outputs = outputs_of_both(out, demo_image)
    classes = ['background', 'circle', 'triangle', 'square', 'star']
    for name, (pred, vis) in outputs.items():
        shape = image_shape(Path(pred['image']))
        label_map = cv2.imread(str(out / pred['sem_seg']), cv2.IMREAD_UNCHANGED)
        assert vis.shape[:2] == label_map.shape == shape
        assert pred['classes'] == classes
        counts = np.bincount(label_map.ravel(), minlength=len(classes))
        assert pred['pixels'] == {classes[i]: int(n) for i, n in enumerate(counts) if n}
    pred, _ = outputs[demo_image.name]
    label_map = cv2.imread(str(out / pred['sem_seg']), cv2.IMREAD_UNCHANGED)
    assert np.array_equal(label_map, sample.pred_sem_seg.data[0].numpy())


@pytest.fixture(scope='module')
def cls_checkpoint(demo_data, tmp_path_factory):
    """The classifier demo trained 3 epochs of 1 iteration on the demo crops
    (``demo_trained`` trains iteration-based configs only)."""
    work = tmp_path_factory.mktemp('cls_demo')
    crops = f'{demo_data}/cls'
    run_tool([sys.executable, 'tools/train.py', CLS_DEMO, '--work-dir', str(work), '--cfg-options',
              *(f'{loader}.{key}' for loader in ('train_dataloader', 'val_dataloader',
                                                 'test_dataloader')
                for key in (f'dataset.data_root={crops}', 'num_workers=0',
                            'persistent_workers=False')),
              'train_cfg.max_epochs=3', 'train_cfg.val_interval=3',
              'default_hooks.checkpoint.interval=3'])
    return checkpoint_of(work)


@pytest.fixture(scope='module')
def cls_run(cls_checkpoint, demo_data, tmp_path_factory):
    return photograph_and_demo_image_run(CLS_DEMO, cls_checkpoint, demo_data,
                                         tmp_path_factory.mktemp('infer_cls'))


def test_classification_on_a_photograph_and_a_demo_image(cls_run):
    out, demo_image, sample = cls_run
    outputs = outputs_of_both(out, demo_image)
    classes = ['circle', 'square', 'star', 'triangle']  # the class folders, sorted
    for name, (pred, vis) in outputs.items():
        assert len(pred['pred_scores']) == 4 and abs(sum(pred['pred_scores']) - 1) < 1e-4
        assert pred['pred_class'] == classes[pred['pred_label']]
        assert pred['pred_score'] == max(pred['pred_scores'])
    pred, _ = outputs[demo_image.name]
    assert pred['pred_label'] == int(sample.pred_label)
    np.testing.assert_allclose(pred['pred_scores'], sample.pred_score.numpy(), atol=1e-6)


def infer_with_onnxruntime(config: str, checkpoint: str, reference: Path, tmp: Path,
                           monkeypatch) -> tuple[dict, dict, dict]:
    """``tools/infer.py --backend onnxruntime`` on the images of the PyTorch
    run ``reference``, twice (the export cached in a fresh TORCH_HOME): the
    index, its outputs and the PyTorch run's outputs."""
    monkeypatch.setenv('TORCH_HOME', str(tmp / 'torch_home'))
    expected = read_outputs(reference)
    folder = image_folder(tmp / 'images', *(Path(pred['image']) for pred, _ in
                                            expected.values()))
    for run in ('first', 'second'):
        with contextlib.redirect_stdout(io.StringIO()):
            infer_tool.main([config, checkpoint, str(folder), '--out-dir', str(tmp / run),
                             '--backend', 'onnxruntime'])
    first, second = (json.loads((tmp / run / 'infer.json').read_text())
                     for run in ('first', 'second'))
    assert first['backend'] == 'onnxruntime' and first['device'] == 'cpu'
    assert second['onnx'] == first['onnx'] and Path(first['onnx']).parent == (
        tmp / 'torch_home/hub/onnx')
    assert [p.name for p in Path(first['onnx']).parent.iterdir()] == [Path(first['onnx']).name]
    assert max(first['onnx_check'].values()) <= 1e-4
    return second, read_outputs(tmp / 'second'), expected


def test_detection_with_the_backbone_and_neck_in_onnxruntime(demo_trained, det_run, tmp_path,
                                                             monkeypatch):
    """The heads in PyTorch on onnxruntime's features: PyTorch's detections."""
    _, outputs, expected = infer_with_onnxruntime(
        DET_DEMO, checkpoint_of(demo_trained(DET_DEMO)), det_run[0], tmp_path, monkeypatch)
    assert set(outputs) == set(expected)
    for name, (pred, _) in outputs.items():
        ref = expected[name][0]
        assert pred['labels'] == ref['labels']
        np.testing.assert_allclose(pred['scores'], ref['scores'], rtol=0, atol=1e-4)
        np.testing.assert_allclose(pred['bboxes'], ref['bboxes'], rtol=0, atol=0.05)


def test_segmentation_with_the_backbone_in_onnxruntime(demo_trained, seg_run, tmp_path,
                                                       monkeypatch):
    index, outputs, expected = infer_with_onnxruntime(
        SEG_DEMO, checkpoint_of(demo_trained(SEG_DEMO)), seg_run[0], tmp_path, monkeypatch)
    for name, (pred, _) in outputs.items():
        label_map, ref = (cv2.imread(str(root / p['sem_seg']), cv2.IMREAD_UNCHANGED)
                          for root, p in ((tmp_path / 'second', pred),
                                          (seg_run[0], expected[name][0])))
        assert (label_map == ref).mean() >= 0.9999


def test_classification_with_the_backbone_and_neck_in_onnxruntime(cls_checkpoint, cls_run,
                                                                   tmp_path, monkeypatch):
    _, outputs, expected = infer_with_onnxruntime(CLS_DEMO, cls_checkpoint, cls_run[0], tmp_path,
                                                  monkeypatch)
    for name, (pred, _) in outputs.items():
        assert pred['pred_label'] == expected[name][0]['pred_label']
        np.testing.assert_allclose(pred['pred_scores'], expected[name][0]['pred_scores'],
                                   atol=1e-5)


def test_checkpoint_from_a_url_replacing_an_earlier_output(cls_checkpoint, cls_run, tmp_path,
                                                           monkeypatch):
    """An http(s) checkpoint is downloaded and read like the file (a server on
    127.0.0.1 only); the earlier output in --out-dir is replaced as a whole."""
    shutil.copytree(cls_run[0], tmp_path / 'out')
    (tmp_path / 'out/vis/stale.png').write_bytes(b'')
    monkeypatch.setenv('TORCH_HOME', str(tmp_path / 'torch_home'))
    monkeypatch.setenv('XDG_CACHE_HOME', str(tmp_path / 'cache'))
    for name in ('no_proxy', 'NO_PROXY'):
        monkeypatch.setenv(name, '127.0.0.1,localhost')
    with FileServer() as server:
        server.files['/demo_cls.pth'] = Path(cls_checkpoint).read_bytes()
        out = infer(CLS_DEMO, server.url('/demo_cls.pth'), photograph(), tmp_path / 'out')
    assert not (out / 'vis/stale.png').exists() and not list(tmp_path.glob('.tmp-*'))
    (pred, _), = read_outputs(out).values()
    expected = json.loads((cls_run[0] / 'preds/grace_hopper.json').read_text())
    np.testing.assert_allclose(pred['pred_scores'], expected['pred_scores'], atol=1e-6)


# ---------------------------------------------------------------- bad input

def assert_fails_and_writes_nothing(match: str, out: Path, *inputs, error=Exception,
                                    **options) -> None:
    """The run raises ``error`` matching ``match``; ``out``'s folder holds
    what it held before (no temporary folder left, ``out`` unchanged)."""
    before = sorted(out.parent.rglob('*'))
    with pytest.raises(error, match=match):
        infer(*inputs, out, **options)
    assert sorted(out.parent.rglob('*')) == before


@pytest.fixture
def out(tmp_path) -> Path:
    (tmp_path / 'outputs').mkdir()
    return tmp_path / 'outputs' / 'out'


@pytest.fixture
def unused(tmp_path) -> Path:
    """A checkpoint file the failing runs never get to read."""
    path = tmp_path / 'unused.pth'
    path.write_bytes(b'')
    return path


def test_unreadable_image_is_named(out, unused, tmp_path):
    folder = image_folder(tmp_path / 'images', photograph())
    (folder / 'broken.jpg').write_bytes(b'not a picture')
    assert_fails_and_writes_nothing(r"1 of 2 image\(s\) cannot be read .*broken\.jpg", out,
                                    DET_DEMO, unused, folder,
                                    error=InferError)
    assert_fails_and_writes_nothing('cannot be read', out, DET_DEMO, unused,
                                    folder / 'broken.jpg', error=InferError)


def test_folder_without_images(out, unused, tmp_path):
    folder = tmp_path / 'images'
    folder.mkdir()
    (folder / 'notes.txt').write_text('no pictures here')
    (folder / 'sub').mkdir()
    shutil.copy(photograph(), folder / 'sub')
    assert_fails_and_writes_nothing('no images in folder', out, DET_DEMO, unused, folder,
                                    error=InferError)
    assert_fails_and_writes_nothing('no such image or folder', out, DET_DEMO, unused,
                                    tmp_path / 'missing', error=InferError)


@pytest.mark.parametrize('text,message', [
    ("default_scope = 'mmaction'\nmodel = dict(type='Recognizer2D')",
     r"another task \(default_scope 'mmaction'\)"),
    ("default_scope = 'mmpretrain'\nmodel = dict(type='MAE')",
     "another task: its mmpretrain model 'MAE' is not a model for classification"),
    ("default_scope = 'mmseg'\nmodel = dict(type='DepthEstimator')",
     "is not a model for semantic segmentation"),
    ("model = dict(type='NoSuchModel')", "unknown task: no default_scope"),
    ("default_scope = 'mmdet'\nmodel = dict(type='NoSuchDetector')",
     "unknown task: no mmdet model is called 'NoSuchDetector'"),
])
def test_config_of_another_or_unknown_task(text, message, out, unused, tmp_path):
    config = tmp_path / 'other.py'
    config.write_text(text)
    assert_fails_and_writes_nothing(message, out, config, unused, photograph(),
                                    error=InferError)


def test_outputs_are_named_by_stem_or_by_file_name_where_stems_clash():
    images = [Path('a/photo.jpg'), Path('a/photo.png'), Path('a/other.jpg')]
    assert output_names(images) == ['photo.jpg', 'photo.png', 'other']


def test_task_from_the_model_type_without_default_scope(tmp_path):
    cfg = Config.fromfile(SEG_DEMO)
    cfg.pop('default_scope')
    assert task_scope(cfg, 'seg') == 'mmseg'


def test_checkpoint_of_another_model_keeps_the_earlier_output(demo_trained, det_run, tmp_path):
    """A segmentor's checkpoint for the detector config fails naming the keys,
    before any image runs, and an earlier output stays as it was."""
    out = tmp_path / 'out'
    shutil.copytree(det_run[0], out)
    before = {p: p.read_bytes() for p in out.rglob('*') if p.is_file()}
    seg_checkpoint = checkpoint_of(demo_trained(SEG_DEMO))
    assert_fails_and_writes_nothing('does not fit the model of this config .*missing keys', out,
                                    DET_DEMO, seg_checkpoint, photograph())
    assert {p: p.read_bytes() for p in out.rglob('*') if p.is_file()} == before


class Pickled:
    """An object that a weights-only load refuses."""


def test_checkpoint_with_other_objects_is_refused(out, tmp_path):
    """The checkpoint is read by vattn-mm's safe loader, not mmengine's."""
    path = tmp_path / 'pickled.pth'
    torch.save({'state_dict': {}, 'extra': Pickled()}, path)
    assert_fails_and_writes_nothing('outside the safe-loading allow-list.*--trust-checkpoint', out,
                                    CLS_DEMO, path, photograph(), error=UntrustedCheckpointError)


def test_existing_folder_that_is_no_output_is_kept(out, unused):
    out.mkdir()
    (out / 'mine.txt').write_text('keep')
    assert_fails_and_writes_nothing('is not an output of tools/infer.py', out, DET_DEMO,
                                    unused, photograph(), error=InferError)


def test_onnxruntime_backend_off_the_cpu_without_it_and_unknown_backends(out, unused,
                                                                         monkeypatch):
    assert_fails_and_writes_nothing('onnxruntime runs on the CPU, not on cuda', out, DET_DEMO,
                                    unused, photograph(), error=InferError, device='cuda',
                                    backend='onnxruntime')
    assert_fails_and_writes_nothing("unknown backend 'tensorrt'", out, DET_DEMO, unused,
                                    photograph(), error=InferError, backend='tensorrt')
    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, 'find_spec',
                        lambda name, *a: None if name == 'onnxruntime' else find_spec(name, *a))
    assert_fails_and_writes_nothing(r"needs onnxruntime: pip install -e '\.\[deploy\]'", out,
                                    DET_DEMO, unused, photograph(), error=InferError,
                                    backend='onnxruntime')


@pytest.mark.skipif(torch.cuda.is_available(), reason='needs a machine without CUDA')
def test_missing_device_and_the_command_line_error(out, unused):
    with pytest.raises(SystemExit, match='tools/infer.py: error: --device cuda: no CUDA device'):
        infer_tool.main([DET_DEMO, str(unused), str(photograph()), '--device', 'cuda',
                         '--out-dir', str(out)])
    with pytest.raises(InferError, match="'gpu0' is not a device"):
        resolve_device('gpu0')
    assert not out.exists()
