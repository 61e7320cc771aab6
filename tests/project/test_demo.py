"""tools/demo.sh (what `make demo` runs) ends with tools/infer.py on a
picture (inference itself: tests/apis/test_infer.py)."""
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from ..engine.test_training import CLS_DEMO, DET_DEMO, ROOT, SEG_DEMO


#: an interpreter standing in for .venv/bin/python in tools/demo.sh: it logs
#: its arguments and writes what the next steps read
FAKE_PYTHON = """#!/usr/bin/env bash
echo "$*" >> "$CALLS"
case $1 in
  tools/make_demo_data.py) mkdir -p data/demo/coco/val
                           touch data/demo/coco/val/val_0000.jpg data/demo/coco/val/val_0001.jpg ;;
  tools/train.py) mkdir -p "$4" && echo "$4/iter_9.pth" > "$4/last_checkpoint" ;;
esac
"""


@pytest.mark.parametrize('configs,infer_config', [
    (None, DET_DEMO),
    (f'{SEG_DEMO} configs/demo/p2t_t_maskrcnn_demo.py', 'configs/demo/p2t_t_maskrcnn_demo.py'),
    (CLS_DEMO, CLS_DEMO)])
def test_make_demo_ends_with_inference_on_a_picture(configs, infer_config, tmp_path):
    """tools/demo.sh (what `make demo` runs), in a copy with a stand-in
    interpreter: its last command runs tools/infer.py with the trained Mask
    R-CNN demo (else the first config) on one validation picture."""
    (tmp_path / 'tools').mkdir()
    shutil.copy(ROOT / 'tools/demo.sh', tmp_path / 'tools')
    fake = tmp_path / 'python'
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    env = dict(os.environ, PYTHON=str(fake), CALLS=str(tmp_path / 'calls'))
    env.pop('DEMO_CONFIGS', None)
    if configs:
        env['DEMO_CONFIGS'] = configs
    subprocess.run(['bash', str(tmp_path / 'tools/demo.sh')], env=env, check=True,
                   capture_output=True, timeout=60)
    work = f'work_dirs/{Path(infer_config).stem}'
    assert (tmp_path / 'calls').read_text().splitlines()[-1] == (
        f'tools/infer.py {infer_config} {work}/iter_9.pth data/demo/coco/val/val_0000.jpg '
        f'--out-dir {work}/infer')
