"""The GPU kit (.dev_scripts/gpu_kit/, docs/testing.md): what can be checked without
making it (``make gpu-rehearsal`` runs it): its scripts parse, it carries the
pinned OpenMMLab stack, and the rehearsal imitates only what the node has."""
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
KIT = ROOT / '.dev_scripts' / 'gpu_kit'


def pins(path: Path) -> dict:
    lines = path.read_text().splitlines()
    return dict(line.split('==') for line in lines if '==' in line and not line.startswith('#'))


@pytest.mark.parametrize('script', ['make_kit.sh', 'run.sh', 'rehearse.sh'])
def test_scripts_parse(script):
    subprocess.run(['bash', '-n', str(KIT / script)], check=True)


def test_kit_carries_the_pinned_openmmlab_stack():
    kit, pinned = pins(KIT / 'constraints.txt'), pins(ROOT / 'tools' / 'constraints.txt')
    assert kit.pop('mmcv-lite') == pinned['mmcv']        # mmcv's ops are compiled on the node
    for name in ('mmengine', 'mmdet', 'mmsegmentation', 'mmpretrain'):
        assert kit[name] == pinned[name], name


def test_rehearsal_installs_only_what_the_node_lists():
    node = {re.split('==', line)[0].lower() for line in
            (KIT / 'node_packages.txt').read_text().splitlines()
            if line.strip() and not line.startswith('#')}
    text = (KIT / 'rehearse.sh').read_text()
    used = re.search(r"^USED='([^']*)'", text, re.M).group(1).split()
    assert used and set(used) <= node, sorted(set(used) - node)
    # the node's torch and torchvision: what the rehearsal takes at their listed versions
    assert {'torch', 'torchvision', 'timm'} <= set(used)
    assert re.search(r'^torch==2\.11\.', (KIT / 'node_packages.txt').read_text(), re.M)
