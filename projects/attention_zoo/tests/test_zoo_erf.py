"""tools/zoo_erf.py: effective receptive fields of the zoo's variants through
the library's ERF tool, one panel per variant, and its errors."""
import json

import numpy as np
import pytest

from tests.tools import ROOT, load_tool

PROJECT = ROOT / 'projects' / 'attention_zoo'
load_tool('tools/project_paths.py', PROJECT)
load_tool('analysis/erf.py')
TOOL = load_tool('tools/zoo_erf.py', PROJECT)


def test_variant_grid(tmp_path):
    assert TOOL.main(['sra@quick', 'global@quick', '--size', '32', '--num-images', '1',
                      '--out', str(tmp_path)]) == 0
    report = json.loads((tmp_path / 'zoo_erf.json').read_text())
    assert [m['name'] for m in report['models']] == ['sra@quick', 'global@quick']
    assert all(m['stage'] == 3 for m in report['models'])
    assert sorted(np.load(tmp_path / 'zoo_erf.npz').files) == ['global@quick', 'sra@quick']


@pytest.mark.parametrize('bad, message', [(['nope'], 'unknown zoo variant'),
                                          (['sra@quick', 'hilo@quick', '--checkpoint', 'x.pth'],
                                           'one model')])
def test_bad_arguments(bad, message, capsys):
    with pytest.raises(SystemExit):
        TOOL.main(bad)
    assert message in capsys.readouterr().err
