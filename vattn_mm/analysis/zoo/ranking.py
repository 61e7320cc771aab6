"""The zoo's ranking protocol: per design a mean over seeds with a 95 %
Student-t interval, pairwise Welch tests with Holm's correction over all
pairs of a table, and a ranking that claims only the differences those
tests support (docs/zoo.md, "Probes")."""
from __future__ import annotations

import math
from dataclasses import dataclass
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
    tests.sort()
    claims, m = [], len(tests)
    running = 0.0
    for i, (p, better, worse, diff) in enumerate(tests):
        adjusted = min(1.0, max(running, (m - i) * p))
        running = adjusted
        if adjusted > alpha:
            break               # Holm: once one is not rejected, none after is
        claims.append(Claim(better, worse, diff, adjusted))
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
