"""vattn_mm.analysis.bench's reports: the markdown table and its derived
columns, growth exponents, CSV round trip, the plot, input sizes."""
import pytest

from vattn_mm.analysis.bench import (Row, growth_exponent, growth_markdown, markdown, merge_rows,
                                     parse_shape, plot, read_csv, report_values, series,
                                     write_csv)


def _row(target, shape, ms, peak, frac):
    return Row(target, shape, 'cpu', 'fp32', 25.4, 30.0, fwd_ms=ms, img_per_s=1e3 / ms,
               fwd_peak_mib=peak, fwd_frac_peak=frac)


def test_report_table_and_plot(tmp_path):
    rows = [_row('PVTv2:b2', '512x512', 400, 150, 0.5),
            _row('PVTv2:b2', '800x1344', 1500, 600, 0.45),
            _row('P2T:small', '512x512', 380, 160, 0.55),
            Row('P2T:small', '800x1344', 'cpu', 'fp32', 25.4, 30.0, error='fwd: out of memory')]
    table = markdown(rows)
    lines = table.splitlines()
    assert len([line for line in lines if line.startswith('| ')]) == 5
    assert 'train step' not in lines[0]                 # no training data, no column
    assert 'IQR' not in lines[0] and 'runs' not in lines[0]    # no spread given, no column
    assert '| P2T:small | 800x1344 | 25.4 | 30 | - |' in table
    assert lines[-1] == '- P2T:small 800x1344: fwd: out of memory'
    plot(rows, tmp_path / 'plot.png', 'test')
    assert (tmp_path / 'plot.png').stat().st_size > 10_000


def test_spread_and_run_counts_follow_their_times(tmp_path):
    """The IQR and the number of timed iterations stand beside each median,
    in the table and through a CSV round trip."""
    row = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, fwd_ms=400., fwd_iqr_ms=12.5,
              fwd_runs=7, train_ms=1200., train_iqr_ms=30., train_runs=4)
    head, _, cells = markdown([row]).splitlines()
    assert '| fwd (ms) | fwd IQR (ms) | fwd runs |' in head
    assert '| train step (ms) | train IQR (ms) | train runs |' in head
    assert '| 400 | 12.5 | 7 |' in cells and '| 1200 | 30.0 | 4 |' in cells
    write_csv([row], tmp_path / 'r.csv')
    back, = read_csv(tmp_path / 'r.csv')
    assert (back.fwd_iqr_ms, back.fwd_runs, back.train_runs) == (12.5, 7, 4)


def test_csv_without_the_spread_columns_still_reads(tmp_path):
    """A CSV written before the spread was reported reads with it empty."""
    write_csv([_row('PVTv2:b2', '512x512', 400, 150, 0.5)], tmp_path / 'new.csv')
    lines = (tmp_path / 'new.csv').read_text().splitlines()
    names = lines[0].split(',')
    keep = [i for i, n in enumerate(names) if 'iqr' not in n and not n.endswith('_runs')]
    (tmp_path / 'old.csv').write_text('\n'.join(
        ','.join(line.split(',')[i] for i in keep) for line in lines) + '\n')
    old, = read_csv(tmp_path / 'old.csv')
    assert old.fwd_ms == 400. and old.fwd_iqr_ms is None and old.fwd_runs is None


def test_growth_exponents_of_time_and_memory():
    """A cost linear in the tokens fits exponent 1, a quadratic one 2; the
    table lists models measured at three or more sizes only."""
    sides = (256, 512, 1024)
    linear = [_row('Mixer:LiteMLA', f'{s}x{s}', 10 * (s / 256) ** 2, 5 * (s / 256) ** 2, .5)
              for s in sides]
    quadratic = [_row('Mixer:GlobalSelfAttention', f'{s}x{s}', (s / 256) ** 4, 100, .5)
                 for s in sides]
    assert growth_exponent([(1, 2.), (4, 8.)]) == pytest.approx(1.0)
    assert growth_exponent([(1, 2.)]) is None
    table = growth_markdown(linear + quadratic + [_row('PVTv2:b2', '512x512', 1, 1, 1)])
    assert '| Mixer:LiteMLA | 256x256 .. 1024x1024 | 1.00 / 1.00 | 1.00 / 1.00 | - | - |' in table
    assert '| Mixer:GlobalSelfAttention | 256x256 .. 1024x1024 | 2.00 / 2.00 | 0.00 / 0.00 |' \
        in table
    assert 'PVTv2:b2' not in table
    assert growth_markdown(linear[:2]) == ''


def test_with_cp_columns_compare_with_the_plain_step():
    row = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, train_ms=1000.,
              train_peak_mib=800., train_frac_peak=0.5, train_cp_ms=1250., train_cp_peak_mib=320.,
              cp_time_ratio=1.2)
    assert row.cp_peak_change == pytest.approx(-0.6)
    assert '| 1000 | 800 | 50% | 1250 | 320 | 1.20x | -60% |' in markdown([row])
    alone = Row('PVTv2:b2', '512x512', 'cpu', 'fp32', 25.4, 30.0, train_cp_ms=1250.,
                train_cp_peak_mib=320., cp_time_ratio=1.2)     # no plain peak: no change
    assert alone.cp_peak_change is None and 'with_cp peak change' not in markdown([alone])


def test_runtime_and_dtype_rows_compare_with_eager_and_fp32(tmp_path):
    """One row per (runtime, dtype): speed-ups against the eager row of the
    same dtype and the fp32 row of the same runtime; plot and growth lines
    per series; CSV round trip and merge keep the runtime apart."""
    def row(runtime, dtype, fwd, train, **extra):
        return Row('PVTv2:b2', '512x512', 'cpu', dtype, 25.4, 30.0, runtime=runtime,
                   fwd_ms=fwd, img_per_s=1e3 / fwd, train_ms=train, **extra)
    rows = [row('eager', 'fp32', 400., 1200.), row('compile', 'fp32', 320., 1000.,
                                                   fwd_compile_s=41., train_compile_s=95.,
                                                   max_dev=2e-6),
            row('eager', 'bf16', 250., 900., max_dev=8e-3),
            row('compile', 'bf16', 200., None, fwd_compile_s=40., max_dev=9e-3)]
    values = report_values(rows)
    assert [v['fwd_vs_eager'] for v in values] == [None, 1.25, None, 1.25]
    assert [v['fwd_vs_fp32'] for v in values] == [None, None, 1.6, 1.6]
    assert [v['train_vs_eager'] for v in values] == [None, 1.2, None, None]
    table = markdown(rows)
    head = table.splitlines()[0]
    for column in ('runtime', 'dtype', 'fwd vs eager', 'fwd vs fp32', 'max dev vs fp32 eager',
                   'fwd compile (s)', 'train vs eager', 'train vs fp32', 'train compile (s)'):
        assert f'| {column} |' in head, column
    assert '| PVTv2:b2 | 512x512 | compile | bf16 |' in table
    assert [series(r) for r in rows] == [
        'PVTv2:b2', 'PVTv2:b2 compile', 'PVTv2:b2 bf16', 'PVTv2:b2 compile bf16']
    write_csv(rows, tmp_path / 'r.csv')
    back = read_csv(tmp_path / 'r.csv')
    assert [(r.runtime, r.dtype, r.max_dev) for r in back] == \
        [(r.runtime, r.dtype, r.max_dev) for r in rows]
    assert len(merge_rows(back + back)) == 4
    plain = markdown([rows[0]]).splitlines()[0]        # one runtime and dtype: no such columns
    assert '| runtime |' not in plain and 'vs eager' not in plain and 'vs fp32' not in plain


@pytest.mark.parametrize('text,shape', [('800x1344', (800, 1344)), ('512', (512, 512)),
                                        ('64X96', (64, 96))])
def test_parse_shape(text, shape):
    assert parse_shape(text) == shape


@pytest.mark.parametrize('text', ['800x', 'axb', '0x10', '1x2x3'])
def test_parse_shape_rejects(text):
    with pytest.raises(ValueError, match='bad input size'):
        parse_shape(text)
