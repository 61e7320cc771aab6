from setuptools import find_packages, setup


def read_version() -> str:
    scope: dict = {}
    with open('vattn_mm/version.py') as f:
        exec(f.read(), scope)
    return scope['__version__']


def read_requirements() -> list:
    with open('requirements.txt') as f:
        return [line.strip() for line in f if line.strip() and not line.startswith('#')]


#: ONNX export and its check in onnxruntime (tools/deploy/export_onnx.py)
DEPLOY = ['onnx==1.19.1', 'onnxruntime==1.32.0', 'onnxscript==0.7.2']

setup(
    name='vattn-mm',
    version=read_version(),
    description='Efficient-attention pyramid backbones (PVTv2, P2T, QuadTree, '
                'LITv2, DilateFormer, FocalNet) for OpenMMLab 2.x',
    long_description=open('README.md').read(),
    long_description_content_type='text/markdown',
    packages=find_packages(include=['vattn_mm', 'vattn_mm.*']),
    python_requires='>=3.9',
    install_requires=read_requirements(),
    extras_require={'deploy': DEPLOY,
                    'tests': ['pytest>=7', *DEPLOY]},
    license='Apache-2.0',
)
