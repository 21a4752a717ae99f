"""The paper's claims judged again on the grids already run (docs/paper/*/results.json), with the statistics of
litebert.paper.stats: each comparison a one-sided Welch t-test (TOST for "about equal"), its p-value and the
smallest gap the grid's seeds could have detected. Writes docs/paper/verdicts.md, the summary page: which
claims reproduce at this scale, which are contradicted, which the scale cannot decide.

    python scripts/paper_verdicts.py [--docs docs/paper]
"""

from __future__ import annotations

import argparse
import json
import os
from collections import Counter
from pathlib import Path

from litebert.files import write_text_atomically
from litebert.paper.experiments import EXPERIMENTS
from litebert.paper.report import _fmt, judge, reused_runs
from litebert.paper.stats import ALPHA, Decision, decision_p, false_discovery_q


def judged_claims(results: dict, folder: str, unfinished: str | None = None) -> list[dict]:
    """Every claim of one grid judged on its seeds, on its metric and (for a downstream claim) on held-out MLM
    accuracy as a proxy (none where the paper's own MLM accuracy orders the rows the other way: report.judge);
    each named by its table, its folder when that is not the experiment's name (a second grid of the same
    table: transitions24/, dropout_suite/), the rows it took from other grids, and how many of its runs
    finished when it is unfinished."""
    exp = EXPERIMENTS[results["experiment"]]
    table = exp.table if folder == exp.name else f"{exp.table} ({folder}/)"
    table += f" (unfinished: {unfinished})" if unfinished else ""
    sources = sorted({os.path.basename(origin["grid"]) for _, origin in reused_runs(results)})
    table += f" (rows shared with {', '.join(s + '/' for s in sources)})" if sources else ""
    out = []
    for claim in exp.claims:
        judged = judge(claim, results)
        for c, label in [(judged, claim.metric)] + ([(judged["proxy"], "mlm_acc (proxy)")] if "proxy" in judged else []):
            out.append({**c, "table": table, "label": label})
    return out


def evidence(claims: list[dict]) -> dict[tuple, float]:
    """Each distinct comparison's two-way p (stats.decision_p), keyed by what it was computed from: tables that
    share runs (Table 3's E=128 rows are Table 4's) or grids that share pretraining (Table 8's) repeat one
    comparison, which is one piece of evidence, not several."""
    return {key(c, pair): decision_p(Decision(pair["verdict"], pair["p"], pair["p_against"]))
            for c in claims for pair in c["pairs"] if pair.get("p") is not None}


def key(claim: dict, pair: dict) -> tuple:
    return (claim["metric"], *(round(v, 12) for v in pair["ours"]), round(pair["se"], 12))


def q_values(found: dict[tuple, float], method: str = "bh") -> dict[tuple, float]:
    return dict(zip(found, false_discovery_q(list(found.values()), method)))


def comparison_rows(claims: list[dict], found: dict[tuple, float]) -> list[str]:
    """One line per comparison: its p-values both ways, and its q-value among all the distinct ones (`found`)."""
    qs = q_values(found)
    lines = []
    for c in claims:
        head = f"| {c['table']} | {c['claim']} | {c['label']} |"
        for pair in c["pairs"]:
            if "ours" not in pair:
                lines.append(f"{head} {pair['high']} vs {pair['low']} | not measured | | | | | |")
                continue
            metric, (high, low) = c["metric"], pair["ours"]
            tested = pair.get("p") is not None
            p, against = (f"{pair['p']:.3f}", f"{pair['p_against']:.3f}") if tested else ("-", "-")
            q = f"{qs[key(c, pair)]:.3f}" if tested else "-"
            mde = "-" if pair.get("detectable") is None else _fmt(metric, pair["detectable"])
            lines.append(f"{head} {pair['high']} vs {pair['low']} | **{pair['verdict']}** | "
                         f"{_fmt(metric, high - low)} | {p} | {against} | {q} | {mde} |")
    return lines


def multiplicity(claims: list[dict], found: dict[tuple, float]) -> str:
    """What the table's decisions are worth together: how many chance alone would make, and how many survive
    false-discovery control."""
    tested = sum(pair.get("p") is not None for c in claims for pair in c["pairs"])
    decided = sum(p < 2 * ALPHA for p in found.values())
    survive = {m: sum(q <= 2 * ALPHA for q in q_values(found, m).values()) for m in ("bh", "by")}
    return (f"**Many comparisons.** {tested} comparisons were tested, {len(found)} of them distinct (the rest "
            f"repeat one on the same runs, where tables share rows or grids share pretraining); {decided} of the "
            f"distinct decided (reproduced or contradicted). Were no effect real anywhere, each would decide with "
            f"probability {2 * ALPHA:.2f}, about {2 * ALPHA * len(found):.0f} of them: single decisions are leads, "
            f"not findings. A comparison's two p columns are its one-sided tests, the paper's way and against it; "
            f"q is the Benjamini-Hochberg q-value of twice the smaller of them (the comparison deciding either "
            f"way, `litebert.paper.stats.decision_p`) among the {len(found)} distinct comparisons: {survive['bh']} "
            f"decisions keep q <= {2 * ALPHA:.2f}, the share of false ones expected among them at most "
            f"{2 * ALPHA:.0%}; {survive['by']} under Benjamini-Yekutieli's adjustment, which holds however the "
            "comparisons depend on each other (those sharing a row do). A claim's own verdict (the next table) "
            "needs all its comparisons to reproduce it, or one at alpha / k against it (Bonferroni over its k).")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", default="docs/paper")
    args = parser.parse_args()
    found = sorted(Path(args.docs).glob("*/results.json"))
    seeds, in_progress, claims, scales = {}, [], [], Counter()
    for path in found:
        results = json.loads(path.read_text(encoding="utf-8"))
        scales[results["scale"]] += 1
        finished = sum(len(entry["runs"]) for entry in results["rows"].values())
        planned = len(results["rows"]) * len(results["seeds"])
        unfinished = f"{finished} of {planned} row runs" if finished < planned else None
        if unfinished:
            in_progress.append(f"{path.parent.name}/ ({unfinished})")
        seeds[path.parent.name] = len(results["seeds"])
        claims += judged_claims(results, path.parent.name, unfinished)
    distinct = evidence(claims)
    comparisons = comparison_rows(claims, distinct)
    text = "\n".join([
        f"# The paper's claims at {' and '.join(s.upper() for s in sorted(scales))} scale: what the seeds decide", "",
        "Grids by scale: " + ", ".join(f"{s} {n}" for s, n in sorted(scales.items())) + " (`litebert reproduce "
        "--scale`; a grid's folder name ends in _gpu where it ran on a GPU).", "",
        "Every comparison of the grids in this folder, tested on their seeds (`python scripts/paper_verdicts.py`; "
        "the statistics are `litebert/paper/stats.py`): a one-sided Welch t-test of the paper's ordering (TOST "
        f"for 'about equal'), alpha {ALPHA}. **reproduced**: the ordering holds beyond chance; **contradicted**: "
        "the opposite ordering does; **inconclusive**: neither, and the last column is the gap these seeds could "
        "have detected with power 0.8, so an inconclusive row with a detectable gap larger than the paper's "
        "effect needs more seeds, not another reading. Gaps and detectable gaps are percentage points where the "
        "metric is an accuracy.", "",
        "Seeds per grid: " + ", ".join(f"{k} {v}" for k, v in sorted(seeds.items())) + ". With two seeds a "
        "Welch test has about one degree of freedom: only gaps many times the seed-to-seed spread decide.", "",
        *([f"Unfinished grids, judged on the runs finished so far (a comparison with a row not run is not "
           f"measured): {', '.join(in_progress)}.", ""] if in_progress else []),
        multiplicity(claims, distinct), "",
        "## Claims", "",
        "| table | the paper's claim | metric | verdict | its comparisons |", "|---|---|---|---|---|",
        *[f"| {c['table']} | {c['claim']} | {c['label']} | **{c['verdict']}** | {tally(c)} |" for c in claims], "",
        "## Comparisons", "",
        "| table | the paper's claim | metric | comparison | verdict | gap | p, the paper's way | p, against | "
        "q, either way | smallest detectable gap |",
        "|---|---|---|---|---|---|---|---|---|---|",
        *comparisons, ""])
    write_text_atomically(Path(args.docs) / "verdicts.md", text)
    print(f"wrote {Path(args.docs) / 'verdicts.md'} ({len(comparisons)} comparisons from {len(found)} grids)")


def tally(claim: dict) -> str:
    counts = Counter(pair.get("verdict", "not measured").split(" (")[0] for pair in claim["pairs"])
    return ", ".join(f"{n} {v}" for v, n in counts.most_common())


if __name__ == "__main__":
    main()
