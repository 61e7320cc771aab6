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


#: ONNX export (PyTorch's TorchScript-based exporter writes with onnx) and its check in
#: onnxruntime (tools/deploy/export_onnx.py); opset 17, the default, needs both >= 1.12
DEPLOY = ['onnx>=1.12', 'onnxruntime>=1.12']

setup(
    name='vattn-mm',
    version=read_version(),
    description='Efficient-attention pyramid backbones (PVTv2, P2T, QuadTree, '
                'LITv2, DilateFormer, FocalNet, Agent-PVT, EfficientViT) for OpenMMLab 2.x',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['vattn_mm', 'vattn_mm.*']),
    python_requires='>=3.9',
    install_requires=read_requirements(),
    extras_require={'deploy': DEPLOY,
                    'tests': ['pytest>=7', *DEPLOY]},
    license='Apache-2.0',
    license_files=['LICENSE'],
)
