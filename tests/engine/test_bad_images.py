"""Unreadable images in training, through tools/train.py: with
``NameImageErrors(skip_unreadable=True)`` the run skips them, logging each
with the count, and trains on; more than ``max_skipped_share`` of the loads
stop it with an error naming the share and the file. (By default a run stops
at the first one, naming the file: tests/backbones/test_bad_inputs.py.)"""
import shutil

import pytest

from .test_reliability import demo64, finish, logged_train_iters, start, tiny_seg_config, train_cmd  # noqa: F401

pytestmark = pytest.mark.slow


def skipping_config(tmp_path, data_root, broken: int, share: float):
    """tiny_seg on a copy of the data with ``broken`` training images
    truncated, loading through NameImageErrors with skipping on."""
    root = tmp_path / 'data'
    shutil.copytree(data_root, root)
    for image in sorted((root / 'ade/images/training').glob('*.jpg'))[:broken]:
        image.write_bytes(image.read_bytes()[:40])
    base = tiny_seg_config(tmp_path, root, flip_prob=0.0)
    config = tmp_path / 'skipping.py'
    config.write_text(f"""_base_ = ['{base}']
train_dataloader = dict(dataset=dict(pipeline=[
    dict(type='NameImageErrors', transform=dict(type='LoadImageFromFile'), skip_unreadable=True,
         max_skipped_share={share}),
    dict(type='LoadAnnotations', reduce_zero_label=False),
    dict(type='PackSegInputs'),
]))
train_cfg = dict(max_iters=4, val_interval=4)
""")
    return config


def test_unreadable_images_are_skipped_and_counted(demo64, tmp_path):  # noqa: F811
    config = skipping_config(tmp_path, demo64, broken=1, share=0.2)
    log = tmp_path / 'train.log'
    text = finish(start(train_cmd(config, tmp_path / 'work'), log), log)
    skips = [line for line in text.splitlines() if 'Skipped an unreadable image' in line]
    assert skips and 'train_0000.jpg' in skips[0] and '(1 of ' in skips[0], text[-3000:]
    assert logged_train_iters(text) == [1, 2, 3, 4]


def test_more_unreadable_images_than_the_share_stop_the_run(demo64, tmp_path):  # noqa: F811
    config = skipping_config(tmp_path, demo64, broken=3, share=0.01)
    log = tmp_path / 'train.log'
    text = finish(start(train_cmd(config, tmp_path / 'work'), log), log, ok=False)
    assert 'ImageLoadError: 2 of ' in text and 'more than max_skipped_share=0.01' in text, \
        text[-3000:]
