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
from pathlib import Path

from litebert.files import write_text_atomically
from litebert.paper.experiments import EXPERIMENTS
from litebert.paper.report import _fmt, judge, reused_runs


def rows_for(results: dict, folder: str, unfinished: str | None = None) -> list[str]:
    """The verdict lines of one grid; a grid in a folder not named after its experiment (a second grid of the
    same table: transitions24/, dropout_suite/) names its folder beside the table, and an unfinished one how
    many of its runs finished."""
    exp = EXPERIMENTS[results["experiment"]]
    table = exp.table if folder == exp.name else f"{exp.table} ({folder}/)"
    table += f" (unfinished: {unfinished})" if unfinished else ""
    sources = sorted({os.path.basename(origin["grid"]) for _, origin in reused_runs(results)})
    table += f" (rows shared with {', '.join(s + '/' for s in sources)})" if sources else ""
    lines = []
    for claim in exp.claims:
        judged = judge(claim, results)
        for c, label in [(judged, claim.metric)] + ([(judged["proxy"], "mlm_acc (proxy)")] if "proxy" in judged else []):
            for pair in c["pairs"]:
                if "ours" not in pair:
                    lines.append(f"| {table} | {claim.text} | {label} | {pair['high']} vs {pair['low']} | "
                                 "not measured | | | |")
                    continue
                metric = c["metric"]
                gap = pair["ours"][0] - pair["ours"][1]
                p = "-" if pair.get("p") is None else f"{pair['p']:.3f}"
                mde = "-" if pair.get("detectable") is None else _fmt(metric, pair["detectable"])
                lines.append(f"| {table} | {claim.text} | {label} | {pair['high']} vs {pair['low']} | "
                             f"**{pair['verdict']}** | {_fmt(metric, gap)} | {p} | {mde} |")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--docs", default="docs/paper")
    args = parser.parse_args()
    found = sorted(Path(args.docs).glob("*/results.json"))
    table = ["| table | the paper's claim | metric | comparison | verdict | gap | p | smallest detectable gap |",
             "|---|---|---|---|---|---|---|---|"]
    seeds, in_progress = {}, []
    for path in found:
        results = json.loads(path.read_text(encoding="utf-8"))
        finished = sum(len(entry["runs"]) for entry in results["rows"].values())
        planned = len(results["rows"]) * len(results["seeds"])
        unfinished = f"{finished} of {planned} row runs" if finished < planned else None
        if unfinished:
            in_progress.append(f"{path.parent.name}/ ({unfinished})")
        seeds[path.parent.name] = len(results["seeds"])
        table += rows_for(results, path.parent.name, unfinished)
    text = "\n".join([
        "# The paper's claims at CPU scale: what the seeds decide", "",
        "Every comparison of the grids in this folder, tested on their seeds (`python scripts/paper_verdicts.py`; "
        "the statistics are `litebert/paper/stats.py`): a one-sided Welch t-test of the paper's ordering (TOST "
        "for 'about equal'), alpha 0.05. **reproduced**: the ordering holds beyond chance; **contradicted**: the "
        "opposite ordering does; **inconclusive**: neither, and the last column is the gap these seeds could have "
        "detected with power 0.8, so an inconclusive row with a detectable gap larger than the paper's effect "
        "needs more seeds, not another reading. Gaps and detectable gaps are percentage points where the metric "
        "is an accuracy.", "",
        "Seeds per grid: " + ", ".join(f"{k} {v}" for k, v in sorted(seeds.items())) + ". With two seeds a "
        "Welch test has about one degree of freedom: only gaps many times the seed-to-seed spread decide.", "",
        *([f"Unfinished grids, judged on the runs finished so far (a comparison with a row not run is not "
           f"measured): {', '.join(in_progress)}.", ""] if in_progress else []),
        *table, ""])
    write_text_atomically(Path(args.docs) / "verdicts.md", text)
    print(f"wrote {Path(args.docs) / 'verdicts.md'} ({len(table) - 2} comparisons from {len(found)} grids)")


if __name__ == "__main__":
    main()
