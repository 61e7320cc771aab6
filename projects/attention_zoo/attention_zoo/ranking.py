"""The zoo's ranking protocol: per design a mean over seeds with a 95 %
Student-t interval, pairwise Welch tests with Holm's correction over all
pairs of a table, a ranking that claims only the differences those tests
support, and the main effects of a two-factor grid (paired tests of cell
means over the other factor) (projects/attention_zoo/README.md, "Probes")."""
from __future__ import annotations

import math
from dataclasses import dataclass, replace
from itertools import combinations
from typing import Mapping, Sequence

#: the family-wise error rate of one table's claims
ALPHA = 0.05


@dataclass(frozen=True)
class Estimate:
    """Mean of ``n`` seeds and its 95 % t-interval (``half`` = half-width;
    infinite below 2 seeds)."""

    mean: float
    half: float
    n: int

    @property
    def low(self) -> float:
        return self.mean - self.half

    @property
    def high(self) -> float:
        return self.mean + self.half


def estimate(values: Sequence[float], confidence: float = 0.95) -> Estimate:
    """Mean and ``confidence`` t-interval of ``values``."""
    from scipy import stats
    values = [float(v) for v in values]
    if not values:
        raise ValueError('estimate of no values')
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return Estimate(mean, math.inf, n)
    sd = math.sqrt(sum((v - mean) ** 2 for v in values) / (n - 1))
    return Estimate(mean, float(stats.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n), n)


def welch_p(a: Sequence[float], b: Sequence[float]) -> float:
    """Two-sided Welch t-test p-value of mean(a) != mean(b); 1 where either
    has fewer than 2 values, 0 where both are constant and differ."""
    from scipy import stats
    if len(a) < 2 or len(b) < 2:
        return 1.0
    if max(a) == min(a) and max(b) == min(b):
        return 0.0 if a[0] != b[0] else 1.0
    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


@dataclass(frozen=True)
class Claim:
    """``better`` scores higher than ``worse`` by ``diff`` (means), Holm-adjusted ``p``."""

    better: str
    worse: str
    diff: float
    p: float


def holm(pvalues: Sequence[float]) -> list[float]:
    """Holm's step-down adjusted p-values, in the order given: a test is
    rejected at family-wise level ``alpha`` where its adjusted p is at most
    ``alpha``."""
    order = sorted(range(len(pvalues)), key=lambda i: pvalues[i])
    adjusted, running = [1.0] * len(pvalues), 0.0
    for rank, i in enumerate(order):
        running = min(1.0, max(running, (len(pvalues) - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def supported_claims(scores: Mapping[str, Sequence[float]], alpha: float = ALPHA
                     ) -> list[Claim]:
    """Every pairwise difference of ``{design: seed scores}`` that Welch's
    test supports at family-wise level ``alpha`` (Holm over all pairs),
    largest difference first."""
    names = [n for n in scores if len(scores[n]) >= 2]
    tests = []
    for a, b in combinations(names, 2):
        ma = sum(scores[a]) / len(scores[a])
        mb = sum(scores[b]) / len(scores[b])
        better, worse = (a, b) if ma >= mb else (b, a)
        tests.append((welch_p(scores[a], scores[b]), better, worse, abs(ma - mb)))
    adjusted = holm([t[0] for t in tests])
    claims = [Claim(better, worse, diff, p)
              for (_, better, worse, diff), p in zip(tests, adjusted) if p <= alpha]
    return sorted(claims, key=lambda c: -c.diff)


def supported_ranks(scores: Mapping[str, Sequence[float]], alpha: float = ALPHA
                    ) -> dict[str, int]:
    """``{design: rank}``: 1 + the number of designs supported as better
    (designs no test separates share a rank), by mean within a rank."""
    claims = supported_claims(scores, alpha)
    above = {n: sum(c.worse == n for c in claims) for n in scores}
    order = sorted(scores, key=lambda n: (above[n], -sum(scores[n]) / max(1, len(scores[n]))))
    return {n: 1 + above[n] for n in order}


def discriminates(a: Sequence[float], b: Sequence[float]) -> bool:
    """Do two designs differ beyond the seed spread: their 95 % intervals
    are disjoint (stricter than Welch's test)."""
    ea, eb = estimate(a), estimate(b)
    return ea.high < eb.low or eb.high < ea.low


@dataclass(frozen=True)
class Effect:
    """Level ``better`` of a factor scores higher than ``worse``: by ``diff``
    ± ``half`` (mean and 95 % t half-interval of the paired differences of
    cell means over the other factor's ``n`` levels), higher in ``wins`` of
    them; Holm-adjusted ``p``."""

    better: str
    worse: str
    diff: float
    half: float
    wins: int
    n: int
    p: float


def paired_p(diffs: Sequence[float]) -> float:
    """Two-sided one-sample t-test p-value of mean(diffs) != 0; 1 below 2
    values, 0 where the differences are constant and not 0."""
    from scipy import stats
    if len(diffs) < 2:
        return 1.0
    if max(diffs) == min(diffs):
        return 0.0 if diffs[0] != 0 else 1.0
    return float(stats.ttest_1samp(diffs, 0.0).pvalue)


def supported_effects(cells: Mapping[str, Mapping[str, float]], alpha: float = ALPHA
                      ) -> list[Effect]:
    """The main effects of one factor of a grid ``{level: {other level:
    cell mean}}`` that the data support: per pair of levels a paired t-test
    of their cell means over the other factor's levels both have, Holm over
    the pairs at family-wise level ``alpha``; largest difference first."""
    tests: list[tuple[float, Effect]] = []
    for a, b in combinations(cells, 2):
        shared = [k for k in cells[a] if k in cells[b]]
        diffs = [cells[a][k] - cells[b][k] for k in shared]
        if len(diffs) < 2:
            continue
        e = estimate(diffs)
        better, worse, sign = (a, b, 1) if e.mean >= 0 else (b, a, -1)
        tests.append((paired_p(diffs), Effect(better, worse, sign * e.mean, e.half,
                                              sum(sign * d > 0 for d in diffs), len(diffs), 1.0)))
    adjusted = holm([p for p, _ in tests])
    effects = [replace(e, p=p) for (_, e), p in zip(tests, adjusted) if p <= alpha]
    return sorted(effects, key=lambda e: -e.diff)


#: what became of a claim on another geometry or schedule
HELD, NOT_SEPARATED, REVERSED, NOT_RUN = 'held', 'not separated', 'reversed', 'not run'


def claim_fate(better: str, worse: str, supported: Sequence, ran: Sequence[str]) -> str:
    """The fate of "``better`` above ``worse``" among another study's
    ``supported`` claims or effects (anything with ``better`` / ``worse``),
    whose designs or levels were ``ran``: :data:`HELD`, :data:`REVERSED`,
    :data:`NOT_SEPARATED`, or :data:`NOT_RUN` (one of the two is missing)."""
    if better not in ran or worse not in ran:
        return NOT_RUN
    pairs = {(c.better, c.worse) for c in supported}
    if (better, worse) in pairs:
        return HELD
    return REVERSED if (worse, better) in pairs else NOT_SEPARATED
