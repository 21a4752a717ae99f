"""The statistics a reproduction's verdicts rest on: each cell's mean with a t interval over its seeds, and each
claimed comparison tested with Welch's t-test, so that a verdict says what the seeds can and cannot decide.

A comparison is a gap between two sides, each a row's mean or a difference of rows' means ("a - b"). Its
standard error adds the rows' squared standard errors (sd^2 / n); its degrees of freedom are Welch and
Satterthwaite's. Two kinds of claim:
  order  the paper says high > low: one-sided Welch test of gap > 0. "reproduced" when p < alpha,
         "contradicted" when the opposite one-sided test rejects (gap < 0 at alpha), else "inconclusive".
  near   the paper says a ~ b within tol: two one-sided tests (TOST). "reproduced" when the 1 - 2 alpha
         interval of the gap lies inside (-tol, tol), "contradicted" when it lies wholly outside, else
         "inconclusive".
Beside each verdict: the smallest gap the grid could have detected (one-sided alpha, power 0.8) at the
standard error it measured, so "inconclusive" says whether more seeds or a larger effect would decide it.
One seed per row gives no standard error: such a comparison is "inconclusive (one seed)"; a seed that scored NaN
makes it "inconclusive (not a number)", untested like one seed.

Many comparisons: a claim of k comparisons is reproduced only when all k are (an intersection-union test, level
alpha as it stands) and contradicted when one opposite test holds at alpha / k (Bonferroni), since "any of k" at
alpha each would contradict a true claim up to k times as often. Across a table of comparisons, each one's chance
of deciding either way under no effect is 2 alpha; `decision_p` is that two-way p-value and `false_discovery_q`
adjusts it for false discoveries, so a summary can say which decisions survive among all the table's.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NamedTuple

ALPHA = 0.05  # one-sided level of every test
POWER = 0.8  # the power the smallest detectable gap is quoted at
LEVEL = 0.95  # the cells' intervals


def _t():
    from scipy import stats  # an optional dependency (the eval extra); only reports need it
    return stats.t


@dataclass(frozen=True)
class Cell:
    """One row's metric over its seeds."""

    mean: float
    sd: float | None  # sample standard deviation; None for one seed
    n: int

    @property
    def half_width(self) -> float | None:
        """Half the LEVEL t interval of the mean (None for one seed)."""
        if self.sd is None or self.n < 2:
            return None
        return float(_t().ppf(0.5 + LEVEL / 2, self.n - 1)) * self.sd / math.sqrt(self.n)


def cell(values: Sequence[float]) -> Cell:
    n = len(values)
    m = sum(values) / n
    sd = math.sqrt(sum((v - m) ** 2 for v in values) / (n - 1)) if n > 1 else None
    return Cell(m, sd, n)


@dataclass(frozen=True)
class Gap:
    """A side of a comparison minus the other: its value, standard error and Welch degrees of freedom."""

    value: float
    se: float | None  # None when some row has one seed
    df: float | None


def gap(terms: Sequence[tuple[int, Cell | float]]) -> Gap:
    """sum(sign * term): cells contribute their means and squared standard errors, numbers are exact. A row on
    both sides ("L12 - L6 vs L24 - L12") is one term with its coefficients summed, its variance counted once."""
    value, coefficients, cells = 0.0, {}, {}
    for sign, term in terms:
        if isinstance(term, Cell):
            coefficients[id(term)] = coefficients.get(id(term), 0) + sign
            cells[id(term)] = term
        else:
            value += sign * term
    var, denominator, known = 0.0, 0.0, True
    for key, c in coefficients.items():
        term = cells[key]
        value += c * term.mean
        if c == 0:
            continue
        if term.sd is None or term.n < 2:
            known = False
            continue
        v = c * c * term.sd ** 2 / term.n
        var += v
        denominator += v * v / (term.n - 1)
    if not known:
        return Gap(value, None, None)
    if var == 0.0:  # every seed agreed exactly: no spread to test against
        return Gap(value, 0.0, math.inf)
    return Gap(value, math.sqrt(var), var * var / denominator)


def detectable(g: Gap) -> float | None:
    """The smallest true gap a one-sided ALPHA test detects with probability POWER at this standard error."""
    if g.se is None or not math.isfinite(g.se):
        return None
    t = _t()
    return (float(t.ppf(1 - ALPHA, g.df)) + float(t.ppf(POWER, g.df))) * g.se if g.se else 0.0


class Decision(NamedTuple):
    """One comparison's verdict with the p-values of both conclusions it could reach: `p` for the paper's side,
    `p_against` for the opposite (the ordering reversed; for "near", the gap beyond the tolerance)."""

    verdict: str
    p: float | None  # None when untested (one seed, or a NaN)
    p_against: float | None


def _decide(p: float, p_against: float) -> Decision:
    verdict = "reproduced" if p < ALPHA else "contradicted" if p_against < ALPHA else "inconclusive"
    return Decision(verdict, p, p_against)


def _untestable(g: Gap) -> Decision | None:
    """The verdict of a gap no test can decide: one seed (no standard error), or a score that is not a number (a
    NaN seed), whose p-values would be NaN: every comparison with them false, it would pass as "inconclusive"
    and make its claim's verdict hang on the order of the claim's comparisons (min() over a NaN)."""
    if g.se is None:
        return Decision("inconclusive (one seed)", None, None)
    if not (math.isfinite(g.value) and math.isfinite(g.se)):
        return Decision("inconclusive (not a number)", None, None)
    return None


def order_verdict(g: Gap) -> Decision:
    """A claim high > low: the one-sided Welch test of gap > 0, and of gap < 0 against it."""
    if untested := _untestable(g):
        return untested
    if g.se == 0.0:
        return _decide(0.0 if g.value > 0 else 1.0, 0.0 if g.value < 0 else 1.0)
    p = float(_t().sf(g.value / g.se, g.df))
    return _decide(p, 1.0 - p)


def near_verdict(g: Gap, tol: float) -> Decision:
    """A claim |a - b| <= tol: TOST (p the larger of its two one-sided p-values), and against it the one-sided
    test that the gap lies beyond tol on the side it fell (the 1 - 2 ALPHA interval wholly outside)."""
    if untested := _untestable(g):
        return untested
    if g.se == 0.0:
        return _decide(0.0, 1.0) if abs(g.value) < tol else _decide(1.0, 0.0)
    t = _t()
    p = max(float(t.sf((g.value + tol) / g.se, g.df)), float(t.cdf((g.value - tol) / g.se, g.df)))
    p_against = min(float(t.sf((g.value - tol) / g.se, g.df)), float(t.cdf((g.value + tol) / g.se, g.df)))
    return _decide(p, p_against)


def claim_verdict(decisions: Sequence[Decision], expected: int) -> str:
    """A claim's verdict from its comparisons': reproduced when all are, contradicted when one opposite test
    holds at ALPHA / k for the claim's k comparisons (the module's docstring says why)."""
    if not decisions:
        return "not measured"
    if len(decisions) < expected:
        return "incomplete"
    if all(d.verdict == "reproduced" for d in decisions):
        return "reproduced"
    against = [d.p_against for d in decisions if d.p_against is not None]
    if against and min(against) < ALPHA / len(decisions):
        return "contradicted"
    return "inconclusive"


def decision_p(d: Decision) -> float | None:
    """The p-value of the comparison deciding either way (Bonferroni over its two one-sided tests): below
    2 ALPHA exactly when its verdict is reproduced or contradicted."""
    return None if d.p is None else min(1.0, 2 * min(d.p, d.p_against))


def false_discovery_q(ps: Sequence[float], method: str = "bh") -> list[float]:
    """Many comparisons' q-values: a decision with q <= Q is among decisions whose expected share of false ones
    is at most Q. "bh" (Benjamini-Hochberg) assumes the tests independent or positively dependent; comparisons
    that share a row are not always so ("a vs b" and "b vs c" move oppositely with b), and "by"
    (Benjamini-Yekutieli) holds under any dependence, at a price of about ln(m) + 0.58 for m comparisons."""
    from scipy.stats import false_discovery_control
    return [float(q) for q in false_discovery_control(list(ps), method=method)] if ps else []


def spread_sources(by_pretrain_seed: Mapping[str, Sequence[float]]) -> dict[str, float] | None:
    """How much of a score's variance comes from pretraining seeds and how much from fine-tuning seeds.

    {pretraining seed: [score per fine-tuning seed]}, the fine-tuning seeds in the same order for every checkpoint:
    a crossed design (seed s fine-tunes every checkpoint with the same classifier init and data order), read by a
    two-way random-effects ANOVA without replication, score = mean + pretraining + fine-tuning seed + residual
    (interaction and noise). A one-way analysis, which treats the fine-tuning seeds as nested, subtracts the
    fine-tuning seeds' own variance / r from the pretraining variance (its between-checkpoint term has none of it:
    the same seeds sit in every group). Estimates below zero are taken as zero. `finetuning_variance` is the
    fine-tuning side whole (seed + residual): the spread a new fine-tuning seed brings to one checkpoint.
    None where nothing can be split: one seed on either side, or a seed that scored NaN (the clamp at zero would
    report its NaN estimates as no variance at all)."""
    groups = [list(v) for v in by_pretrain_seed.values() if v]
    if len(groups) < 2 or any(len(g) != len(groups[0]) for g in groups) or len(groups[0]) < 2:
        return None
    if not all(math.isfinite(v) for g in groups for v in g):
        return None
    k, r = len(groups), len(groups[0])
    grand = sum(map(sum, groups)) / (k * r)
    rows = [sum(g) / r for g in groups]
    cols = [sum(g[j] for g in groups) / k for j in range(r)]
    ms_rows = r * sum((m - grand) ** 2 for m in rows) / (k - 1)
    ms_cols = k * sum((m - grand) ** 2 for m in cols) / (r - 1)
    residual = sum((g[j] - rows[i] - cols[j] + grand) ** 2 for i, g in enumerate(groups) for j in range(r)) \
        / ((k - 1) * (r - 1))
    pretrain, seed = max(0.0, (ms_rows - residual) / r), max(0.0, (ms_cols - residual) / k)
    total = pretrain + seed + residual
    return {"pretraining_variance": pretrain, "finetuning_seed_variance": seed, "residual_variance": residual,
            "finetuning_variance": seed + residual, "pretraining_share": pretrain / total if total else 0.0}