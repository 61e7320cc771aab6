"""timm's own model tests on every vattn_* model.

The functions of ``tests/test_models.py`` of the pinned timm (its sdist: the
wheel has no tests; ``tools/fetch_timm_tests.sh`` puts them into the
environment) are called with our model names: their parametrisation selects
timm's models by name or module.  What is left out, and why, is
:data:`LARGE` (docs/timm.md lists it).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from pathlib import Path

import pytest

from .conftest import FULL_STACK_ENV

timm = pytest.importorskip('timm')
vattn_timm = pytest.importorskip('vattn_mm.timm')

TIMM_TESTS = Path(sys.prefix) / 'timm-tests' / timm.__version__ / 'test_models.py'
#: the tests run: name -> the arguments after the model name
RUN = {
    'test_model_forward': (1, ),
    'test_model_backward': (2, ),
    'test_model_default_cfgs': (1, 'meta'),
    'test_model_forward_features': (1, ),
    'test_model_forward_intermediates_features': (1, ),
    'test_model_forward_intermediates': (1, ),
}
#: the tests that build real weights and run them (the rest run on the meta device)
WEIGHTED = ('test_model_forward', 'test_model_backward', 'test_model_forward_features',
            'test_model_forward_intermediates_features', 'test_model_forward_intermediates')
#: the weighted tests run on the variants up to this many parameters: one to three
#: variants a family, every code path; the larger ones cost 10-30 s a test on 2 cores
#: (FocalNet-H 0.7 G parameters) and run only ``test_model_default_cfgs``.  ``make test``
#: runs every test on the smallest variant of each family (all its tags), ``make test-extended``
#: on the others (the meta-device forwards of ``test_model_default_cfgs`` take 5-15 s a deep model)
MAX_PARAMETERS = 30_000_000


def _timm_tests():
    if not TIMM_TESTS.is_file():
        message = (f'timm {timm.__version__} tests not found at {TIMM_TESTS}: '
                   f'bash tools/fetch_timm_tests.sh {TIMM_TESTS.parent.parent} {timm.__version__}')
        if os.environ.get(FULL_STACK_ENV):
            raise FileNotFoundError(message)
        pytest.skip(message, allow_module_level=True)
    spec = importlib.util.spec_from_file_location('timm_own_test_models', TIMM_TESTS)
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():   # timm's own CI markers (pytest.mark.base, ...)
        warnings.simplefilter('ignore', pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


TIMM_TEST_MODELS = _timm_tests()


def parameters_and_family(name: str) -> tuple:
    model = timm.create_model(name, device='meta')
    return sum(p.numel() for p in model.parameters()), type(model.backbone).__name__


SIZES = {name: parameters_and_family(name) for name in vattn_timm.model_names()}
#: the models the weighted tests leave out (more than MAX_PARAMETERS parameters)
LARGE = sorted(n for n, (size, _) in SIZES.items() if size > MAX_PARAMETERS)
#: the smallest variant of each family
SMALLEST = {min((size, n) for n, (size, f) in SIZES.items() if f == family)[1]
            for family in {f for _, f in SIZES.values()}}


def _cases():
    tagged = timm.list_models('vattn_*', include_tags=True)
    for test in RUN:
        names = tagged if test not in WEIGHTED else [
            n for n in vattn_timm.model_names() if n not in LARGE]
        for name in names:
            marks = () if name.split('.')[0] in SMALLEST else pytest.mark.extended
            yield pytest.param(test, name, id=f'{test}-{name}', marks=marks)


CASES = list(_cases())


@pytest.mark.parametrize('test,name', CASES)
def test_timm_model_test(test, name):
    getattr(TIMM_TEST_MODELS, test)(name, *RUN[test])


def test_what_is_left_out_is_documented():
    """docs/timm.md gives the cases of every test and the models left out."""
    doc = (Path(__file__).parents[1] / 'docs' / 'timm.md').read_text()
    for test in RUN:
        count = sum(c.values[0] == test for c in CASES)
        assert f'| `{test}` | {count} |' in doc, (test, count)
    assert f'{len(LARGE)} variants above {MAX_PARAMETERS // 1_000_000} M parameters' in doc
    assert all(f'`{name}`' in doc for name in LARGE), [n for n in LARGE if f'`{n}`' not in doc]
