import os
import os.path as osp
import shutil
import sys
import warnings

from setuptools import find_packages, setup


def read_version() -> str:
    scope: dict = {}
    with open('vattn_mm/version.py') as f:
        exec(f.read(), scope)
    return scope['__version__']


def read_requirements() -> list:
    """The version ranges in requirements.txt, without comments."""
    with open('requirements.txt') as f:
        return [req for req in (line.split('#', 1)[0].strip() for line in f) if req]


#: MMEngine: registration in its registries, the runner, hooks and tools (and mmcv, checked at import)
OPENMMLAB = ['mmengine>=0.10.0,<1.0.0']
#: the OpenMMLab codebase of each task (a config that needs a missing one names its extra)
DET = [*OPENMMLAB, 'mmdet>=3.3.0,<3.4']
#: mmsegmentation 1.2 imports ftfy and regex (mmseg.utils.tokenizer) without declaring them
SEG = [*OPENMMLAB, 'mmsegmentation>=1.2.0,<1.3', 'ftfy', 'regex']
CLS = [*OPENMMLAB, 'mmpretrain>=1.2.0,<1.3']
#: ONNX export (PyTorch's TorchScript-based exporter writes with onnx) and its check in
#: onnxruntime (tools/deploy/export_onnx.py); opset 17, the default, needs both >= 1.12
DEPLOY = ['onnx>=1.12', 'onnxruntime>=1.12']
#: vattn_mm.timm: the backbones as timm models (tested with timm 1.0.31, and 1.0.30 on Python 3.9)
TIMM = ['timm>=1.0.30']

#: what ``mim search`` / ``mim train`` read from the package's ``.mim`` folder
MIM_FILES = ('configs', 'tools', 'model-index.yml')


def add_mim_extension() -> None:
    """Put MIM_FILES under vattn_mm/.mim: symlinks for an editable install
    (``pip install -e .``), copies for a wheel or a plain install."""
    if 'develop' in sys.argv or 'editable_wheel' in sys.argv:
        mode = 'symlink'
    elif {'sdist', 'bdist_wheel', 'build', 'build_py', 'install'} & set(sys.argv):
        mode = 'copy'
    else:
        return
    root = osp.dirname(osp.abspath(__file__))
    mim_dir = osp.join(root, 'vattn_mm', '.mim')
    os.makedirs(mim_dir, exist_ok=True)
    for name in MIM_FILES:
        src, dst = osp.join(root, name), osp.join(mim_dir, name)
        if osp.islink(dst) or osp.isfile(dst):
            os.remove(dst)
        elif osp.isdir(dst):
            shutil.rmtree(dst)
        if not osp.exists(src):
            warnings.warn(f'{src} does not exist: not added to vattn_mm/.mim')
        elif mode == 'symlink':
            os.symlink(osp.relpath(src, mim_dir), dst)
        elif osp.isdir(src):
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns('__pycache__', '*.pyc'))
        else:
            shutil.copy2(src, dst)


add_mim_extension()

setup(
    name='vattn-mm',
    version=read_version(),
    description='Efficient-attention pyramid backbones (PVTv2, P2T, QuadTree, '
                'LITv2, DilateFormer, FocalNet, Agent-PVT, EfficientViT) for OpenMMLab 2.x',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['vattn_mm', 'vattn_mm.*']),
    package_data={'vattn_mm': ['.mim/model-index.yml', '.mim/configs/**/*', '.mim/tools/**/*']},
    python_requires='>=3.9',
    install_requires=read_requirements(),
    extras_require={'openmmlab': OPENMMLAB, 'det': DET, 'seg': SEG, 'cls': CLS,
                    'all': sorted({*DET, *SEG, *CLS}),
                    'deploy': DEPLOY, 'timm': TIMM,
                    'tests': ['pytest>=7,<9', 'pytest-xdist>=3.5', 'hypothesis>=6.100', *DEPLOY]},
    license='Apache-2.0',
    license_files=['LICENSE'],
)
