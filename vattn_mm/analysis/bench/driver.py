"""A benchmark run: every target at every input size, dtype, runtime and
mode, one :class:`.rows.Row` per (target, size, dtype, runtime), and its
report files."""
from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional, Sequence

from .cases import DEFAULT_MODES, DTYPES, MODES, Case, Measurement
from .plot import plot
from .tables import growth_markdown, markdown
from .rows import Row, fill_row
from .runtimes import RUNTIMES


def check_choices(modes: Sequence[str], dtypes: Sequence[str], runtimes: Sequence[str]) -> None:
    """A clear error for an unknown mode, dtype or runtime."""
    for kind, given, known in (('modes', modes, MODES), ('dtypes', dtypes, DTYPES),
                               ('runtimes', runtimes, tuple(RUNTIMES))):
        bad = sorted(set(given) - set(known))
        if bad:
            raise ValueError(f'unknown {kind} {bad}; choose from {known}')


def benchmark(targets: Sequence[str], shapes: Sequence[tuple[int, int]],
              run_case: Callable[[Case], Measurement], modes: Sequence[str] = DEFAULT_MODES, *,
              dtypes: Sequence[str] = ('fp32', ), runtimes: Sequence[str] = ('eager', ),
              progress: bool = True, on_row: Optional[Callable[[Row], None]] = None,
              errors: tuple[type, ...] = (RuntimeError, ), **case_kwargs) -> list[Row]:
    """Measure every target at every shape, dtype and runtime in every mode,
    each case by ``run_case(case)`` (the tool's worker processes); one
    :class:`Row` per (target, shape, dtype, runtime).  A case failing with
    one of ``errors`` is reported in ``Row.error`` and the others still run;
    a mode a runtime cannot measure is left empty; ``on_row`` sees each
    finished row (e.g. to save it)."""
    from tqdm import tqdm

    from vattn_mm.analysis import spec_complexity
    check_choices(modes, dtypes, runtimes)
    rows = []
    cases = [(dtype, runtime, mode) for dtype in dtypes for runtime in runtimes
             for mode in modes if mode in RUNTIMES[runtime].modes]
    bar = tqdm(total=len(targets) * len(shapes) * len(cases), disable=not progress,
               unit='case', dynamic_ncols=True)
    for target in targets:
        for shape in shapes:
            cx = spec_complexity(target, shape)
            for dtype in dtypes:
                for runtime in runtimes:
                    row = Row(target, f'{shape[0]}x{shape[1]}', case_kwargs.get('device', 'cpu'),
                              dtype, cx.params / 1e6, cx.macs / 1e9, runtime=runtime)
                    for mode in modes:
                        if mode not in RUNTIMES[runtime].modes:
                            continue
                        bar.set_description(f'{target} {row.shape} {dtype} {runtime} {mode}')
                        case = Case(target, shape, mode, dtype=dtype, runtime=runtime,
                                    **case_kwargs)
                        try:
                            fill_row(row, mode, run_case(case))
                        except errors as err:
                            row.error = f'{row.error}; {mode}: {err}'.lstrip('; ')
                        bar.update()
                    rows.append(row)
                    if on_row is not None:
                        on_row(row)
    bar.close()
    return rows


def write_report(rows: Sequence[Row], out: Path, name: str, title: str = '',
                 extra: str = '') -> str:
    """The report of ``rows``: the markdown table, ``extra`` (e.g. the
    comparison with other libraries) and the growth exponents, written to
    ``<out>/<name>.md``, and the figure ``<out>/<name>.png``; returns the
    markdown."""
    text = '\n\n'.join(part for part in (markdown(rows), extra, growth_markdown(rows)) if part)
    (out / f'{name}.md').write_text(text + '\n')
    plot(rows, out / f'{name}.png', title)
    return text
