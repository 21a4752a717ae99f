"""A grid's results, the paper's claims judged on them, and the report: results.json (every finished row's runs,
their mean and spread, the verdicts), report.md (the grid's table beside the paper's) and the plots. It reads
finished rows (their result.json) and runs none: running them is reproduce.py's."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

from litebert.corpus.dataset import PretrainDataset
from litebert.files import save_figure
from litebert.paper.budgets import minutes_budget
from litebert.paper.experiments import SOURCE, Claim, scale_model, split_task
from litebert.paper.grid import Grid, bundled_name, read_json
from litebert.paper.stats import (
    ALPHA,
    LEVEL,
    POWER,
    Cell,
    Decision,
    Gap,
    cell,
    claim_verdict,
    detectable,
    gap,
    near_verdict,
    order_verdict,
    spread_sources,
)

METRICS = ("parameters", "steps", "mlm_acc", "mlm_loss", "sop_acc", "nsp_acc", "mlm_acc_late", "avg",
           "l2_oscillation", "angle_oscillation", "l2_last_ratio")
PAPER_COLUMN = {"avg": "Avg", "mlm_acc": "MLM acc", "sop_acc": "SOP acc", "nsp_acc": "NSP acc"}


def chance(grid: Grid) -> dict[str, float]:
    """The majority label's accuracy on each held-out pair set (what a model that learned nothing scores)."""
    out = {}
    for t in grid.exp.held_out:
        held = PretrainDataset(grid.data.dir("heldout", t))
        positive = sum(int(held[i]["sentence_order_label"]) for i in range(len(held))) / len(held)
        out[f"{t}_acc"] = max(positive, 1 - positive)
    return out


def collect(grid: Grid, state: Mapping[str, Any]) -> dict[str, Any]:
    """results.json: every finished row's runs, their mean and spread, the claims' verdicts. Nothing in it
    depends on wall-clock time or on where the grid ran, so a resumed grid ends with the same file."""
    rows: dict[str, Any] = {}
    for row in grid.exp.rows:
        runs = {str(s): r for s in grid.seeds if (r := read_json(grid.result_path(row, s))) is not None}
        entry: dict[str, Any] = {"changes": {"model": dict(row.model), "data": dict(row.data),
                                             **({"base": row.base} if row.base else {}),
                                             **({"warm_start": row.warm_start} if row.warm_start else {})},
                                 "paper": dict(row.paper), "runs": runs}
        if runs:
            entry["model"] = scale_model(grid.exp, row, grid.scale, grid.data.vocab_size(), grid.sets["model"])
            stats = {}
            for key in METRICS:
                values = [r[key] for r in runs.values() if isinstance(r.get(key), (int, float))]
                if values:
                    stats[key] = dataclasses.asdict(cell(values))
            for task in grid.scale.finetune["tasks"]:  # each task's best dev score beside the average
                values = [r["downstream"][task]["score"] for r in runs.values() if task in r.get("downstream", {})]
                if values:
                    stats[f"task:{task}"] = dataclasses.asdict(cell(values))
                sources = spread_sources({s: r["downstream"][task].get("scores", []) for s, r in runs.items()
                                          if task in r.get("downstream", {})})
                if sources:
                    entry.setdefault("spread_sources", {})[task] = sources
            entry["stats"] = stats
        rows[row.name] = entry
    out = {"experiment": grid.exp.name, "table": grid.exp.table, "title": grid.exp.title, "scale": grid.scale.name,
           "seeds": grid.seeds, "settings": state.get("settings"), "steps": state.get("steps"),
           "recipe": {"train": dict(grid.scale.train), "pretrain": dict(grid.scale.pretrain),
                      "data": {k: ((bundled_name(v) or v) if k == "corpus" and v else v)
                               for k, v in grid.scale.data.items()},
                      "finetune": dict(grid.scale.finetune)},
           "chance": chance(grid) if any(rows[r]["runs"] for r in rows) else {},
           "rows": rows}
    out["claims"] = [judge(c, out) for c in grid.exp.claims]
    return out


def _side(expr: str, values: Mapping[str, Cell]) -> list[tuple[int, Cell | float]] | None:
    """The signed terms of "A", "A - B" (- C ...), a number or "chance"; None if a row has no value."""
    terms: list[tuple[int, Cell | float]] = []
    for i, term in enumerate(expr.split(" - ")):
        sign, term = (1 if i == 0 else -1), term.strip()
        if re.fullmatch(r"-?[\d.]+", term):
            terms.append((sign, float(term)))
        elif term in values:
            terms.append((sign, values[term]))
        else:
            return None
    return terms


class ClaimTest(NamedTuple):
    """How a claim of one kind is decided and written: its verdict from a gap, the test's name, the relation."""
    verdict: Callable[[Gap, float], Decision]
    name: str
    relation: str


CLAIM_TESTS = {"order": ClaimTest(lambda g, tol: order_verdict(g), "one-sided Welch t-test", "vs"),
               "near": ClaimTest(near_verdict, "TOST, two one-sided Welch t-tests", "~")}


def judge(claim: Claim, results: Mapping[str, Any], metric: str | None = None) -> dict[str, Any]:
    """The claim tested on our seeds (litebert.paper.stats: Welch's t-test, or TOST for "near"), per pair, with
    the smallest gap the grid could have detected; and the paper's own numbers beside them."""
    metric = metric or claim.metric
    ours: dict[str, Cell] = {}
    for name, entry in results["rows"].items():
        s = entry.get("stats", {}).get(metric)
        if s:
            ours[name] = Cell(s["mean"], s["sd"], s["n"])
    if metric in results.get("chance", {}):
        ours["chance"] = Cell(results["chance"][metric], 0.0, 1_000_000)  # a property of the data, not a sample
    paper = {name: float(e["paper"][PAPER_COLUMN[metric]]) for name, e in results["rows"].items()
             if metric in PAPER_COLUMN and isinstance(e["paper"].get(PAPER_COLUMN[metric]), float)}
    if metric in ("sop_acc", "nsp_acc"):
        paper["chance"] = 50.0
    pairs, decisions, test = [], [], CLAIM_TESTS[claim.kind]
    for high, low in claim.pairs:
        pair: dict[str, Any] = {"high": high, "low": low}
        pa, pb = _side(high, {k: Cell(v, 0.0, 1) for k, v in paper.items()}), \
            _side(low, {k: Cell(v, 0.0, 1) for k, v in paper.items()})
        if pa and pb:
            pair["paper"] = [gap(pa).value, gap(pb).value]
        a, b = _side(high, ours), _side(low, ours)
        if a and b:
            g = gap(a + [(-sign, term) for sign, term in b])
            d = test.verdict(g, claim.tol)
            pair.update(ours=[gap(a).value, gap(b).value], se=g.se, df=g.df, p=d.p, p_against=d.p_against,
                        verdict=d.verdict, detectable=detectable(g))
            decisions.append(d)
        pairs.append(pair)
    out = {"claim": claim.text, "metric": metric, "kind": claim.kind,
           "verdict": claim_verdict(decisions, len(claim.pairs)), "pairs": pairs,
           "test": f"{test.name}, alpha {ALPHA}; the claim: all comparisons, or one against at alpha / k"}
    if claim.tol:
        out["tol"] = claim.tol
    if metric == "avg":  # the paper's tables score downstream; held-out MLM accuracy is what every row has
        proxy = judge(dataclasses.replace(claim, metric="mlm_acc"), results)
        if against := _paper_orders_against(proxy):
            out["no_proxy"] = f"the paper's own MLM accuracy orders these rows the other way ({against})"
        else:
            out["proxy"] = proxy
    return out


def _paper_orders_against(judged: Mapping[str, Any]) -> str:
    """The comparisons of an "order" claim whose paper numbers go the other way ("SOP 54.0 vs NSP 54.5"), or "".
    A proxy the paper's own table contradicts (Table 5 prints MLM accuracy None > NSP > SOP beside the downstream
    average SOP > NSP, None) would count a result against the paper as one for it, and the other way round."""
    if judged["kind"] != "order":
        return ""
    return ", ".join(f"{pair['high']} {pair['paper'][0]:.1f} vs {pair['low']} {pair['paper'][1]:.1f}"
                     for pair in judged["pairs"] if "paper" in pair and pair["paper"][0] <= pair["paper"][1])


def _fmt(metric: str, value: float) -> str:
    if metric in ("parameters",):
        return f"{value / 1e6:.2f}M"
    if metric == "steps":
        return f"{value:.0f}"
    if metric.endswith("acc") or metric in ("avg", "mlm_acc_late") or metric.startswith("task:"):
        return f"{100 * value:.1f}"
    return f"{value:.3f}"


def _cell(stats: Mapping[str, Any] | None, metric: str) -> str:
    if not stats or metric not in stats:
        return "-"
    s = stats[metric]
    text = _fmt(metric, s["mean"])
    half = Cell(s["mean"], s["sd"], s["n"]).half_width
    if half is not None and metric not in ("parameters", "steps"):
        text += f" ± {_fmt(metric, half)}"
    return text


def _our_columns(grid: Grid, results: Mapping[str, Any]) -> list[tuple[str, str]]:
    cols = [("parameters", "params"), ("steps", "steps"), ("mlm_acc", "MLM acc")]
    if "nsp" in grid.exp.held_out:
        cols.append(("nsp_acc", "NSP acc"))
    cols += [("sop_acc", "SOP acc"), ("mlm_acc_late", "MLM acc, late mean")]
    if grid.exp.analysis == "transitions":
        cols += [("l2_oscillation", "L2 oscillation"), ("angle_oscillation", "angle oscillation"),
                 ("l2_last_ratio", "last L2 / max L2")]
    if any("avg" in e.get("stats", {}) for e in results["rows"].values()):
        cols += [(f"task:{t}", t) for t in grid.scale.finetune["tasks"]] + [("avg", "downstream avg")]
    return cols


def _pair_text(metric: str, pair: Mapping[str, Any], kind: str) -> str:
    text = f"{pair['high']} {CLAIM_TESTS[kind].relation} {pair['low']}"
    if "ours" in pair:
        a, b = pair["ours"]
        test = ""
        if pair.get("p") is not None:  # tested: neither one seed nor a NaN
            # the p that decided: a contradicted pair's own (the opposite ordering's), not the paper's way (~1)
            against = pair["verdict"] == "contradicted" and pair.get("p_against") is not None
            p = f"p against {pair['p_against']:.3g}" if against else f"p {pair['p']:.3g}"
            test = f", SE {_fmt(metric, pair['se'])}, {p}, smallest detectable gap {_fmt(metric, pair['detectable'])}"
        text += (f": ours {_fmt(metric, a)} vs {_fmt(metric, b)} (gap {_fmt(metric, a - b)}{test}) "
                 f"-> {pair['verdict']}")
    else:
        text += ": not measured"
    if "paper" in pair:
        a, b = pair["paper"]
        text += f"; paper {a:.1f} vs {b:.1f}"  # the paper prints one decimal (52.0, not 52)
    return text


def _setup(grid: Grid, results: Mapping[str, Any]) -> str:
    """The report's paragraph on what every row ran and how it was scored and judged."""
    exp, scale = grid.exp, grid.scale
    t, d = scale.train, scale.data
    steps = results.get("steps") or {}
    steps_text = ", ".join(sorted({str(v) for v in steps.values()})) if steps else str(t["max_steps"])
    return (f"**Setup.** Every row: {steps_text} {t['optimizer'].upper()} steps at lr {t['lr']}, batch "
            f"{t['batch_size']}, sequence length {d['max_seq_length']}, vocabulary {d['vocab_size']} "
            f"(a tokenizer trained on the training documents); {d['dupe_factor']} cut(s) of "
            f"`{os.path.basename(str(grid.cfg.corpus or d['corpus']))}`, its last "
            f"{d['held_out_fraction']:.0%} of documents held out. Scores: held-out MLM accuracy and "
            + "/".join(t_.upper() for t_ in exp.held_out) + " accuracy on pairs cut from the held-out documents"
            + (f"; downstream: best dev score after fine-tuning on {', '.join(scale.finetune['tasks'])} "
               + ("(NAME@N: on its first N training examples) "
                  if any(split_task(task)[1] for task in scale.finetune["tasks"]) else "")
               + f"({scale.finetune.get('max_steps')} steps each, one recipe, {grid.finetune_seed_count} "
               "fine-tuning seed(s) per checkpoint), averaged" if
               any("avg" in e.get("stats", {}) for e in results["rows"].values()) else
               "; no downstream fine-tuning in this grid (--downstream adds it)")
            + f". Accuracy cells are percentages; with several seeds, mean ± the half-width of its {LEVEL:.0%} t interval. "
            f"Each comparison is tested on the seeds (one-sided Welch t-test, or TOST for 'about equal', "
            f"alpha {ALPHA}): reproduced, contradicted, or inconclusive at this power, beside the smallest gap "
            f"the grid could have detected (power {POWER}). A claim of k comparisons is reproduced when all "
            f"are, contradicted when one is at alpha / k (Bonferroni).")


def timings(grid: Grid) -> dict[str, dict[str, Any]]:
    """Each finished run's timing.json (its wall-clock seconds, pretraining and fine-tuning, the machine, the
    threads it had and how many runs trained at once), by row and seed."""
    out: dict[str, dict[str, Any]] = {}
    for row in grid.exp.rows:
        for seed in grid.seeds:
            timing = read_json(os.path.join(grid.row_dir(row, seed), "timing.json"))
            if timing is not None and os.path.isfile(grid.result_path(row, seed)):
                out.setdefault(row.name, {})[str(seed)] = timing
    return out


def reused_runs(results: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """(row, where it was trained) for each run a grid took from another (--reuse)."""
    return [(name, run["reused"]) for name, entry in results["rows"].items() for run in entry["runs"].values()
            if run.get("reused")]


def _reused(results: Mapping[str, Any]) -> tuple[str, int]:
    """The report's line on the runs taken from other grids (--reuse), and how many there are."""
    taken = Counter((name, origin["grid"], origin["row"]) for name, origin in reused_runs(results))
    if not taken:
        return "", 0
    return ("**Runs taken from other grids** (`--reuse`: the same recipe, data, scoring and seeds, trained once; "
            "these cells are the same evidence in both tables): "
            + "; ".join(f"{row}: {n} run(s) of `{source}` row {source_row!r}"
                        for (row, source, source_row), n in sorted(taken.items())) + ".", sum(taken.values()))


def _time_spent(spent: Mapping[str, Mapping[str, Any]], finished: int) -> str:
    """Row runs trained by this grid (those taken from another grid counted there) and where they ran."""
    runs = [t for seeds in spent.values() for t in seeds.values()]
    if not runs:
        return ""
    known = [t for t in runs if "machine" in t]  # grids before 2026-11-27 recorded the seconds alone
    ways = sorted({(f"{t['processes']} processes of " if t.get("processes", 1) > 1 else "")
                   + f"{t['threads']} thread(s) each, {t['at_once']} at once" for t in known})
    where = f", {'; '.join(ways)}, on {'; '.join(sorted({t['machine'] for t in known}))}" if known else ""
    resumed = sum(1 for t in runs if t.get("attempts", 1) > 1)
    attempts = " over all its attempts" if all("attempts" in t for t in runs) else \
        " (a resumed run's last attempt only, in grids made before attempts were counted)"
    gaps = ([f"{len(runs) - len(known)} of them recorded their time alone"] if len(known) < len(runs) else []) \
        + ([f"{finished - len(runs)} finished run(s) recorded no time"] if finished > len(runs) else []) \
        + ([f"{resumed} run(s) were stopped and resumed, their attempts summed"] if resumed else [])
    return (f"**Time spent.** {len(runs)} row runs, {sum(t['seconds'] for t in runs) / 3600:.1f} hours of row time "
            f"(each run's wall clock from its start to its result{attempts}, pretraining and fine-tuning{where})"
            + "".join(f"; {g}" for g in gaps) + ".")


def _time_kept(grid: Grid, state: Mapping[str, Any], spent: Mapping[str, Mapping[str, Any]]) -> str:
    """For a grid that gives every row the same minutes (Table 6): the minutes each row's runs really spent in
    training steps, and the probes its steps came from, since the claim rests on the rows' times being equal."""
    if grid.exp.budget != "minutes":
        return ""
    budget = minutes_budget(grid)
    trained = [f"{row} {min(m):.1f}-{max(m):.1f}" for row, seeds in spent.items()
               if (m := [t["pretrain_minutes"] for t in seeds.values() if t.get("pretrain_minutes")])]
    probes = [f"{row} {state['seconds_per_step'][row]:.3g} s ({min(p):.3g}-{max(p):.3g})"
              for row, p in state.get("probes", {}).items()]
    return ("**The same time, as it went.** " + (f"Minutes each row's runs spent in training steps (from their "
            f"logged speed; evaluations and saves left out), against the budget of {budget:g}: "
            f"{', '.join(trained)}. " if trained else "")
            + (f"A step, the median of each row's speed probes (their range): {', '.join(probes)}." if probes
               else "Its steps came from one speed probe a row (grids before 2026-11-27)."))


def report(grid: Grid, results: Mapping[str, Any], state: Mapping[str, Any], plots: list[str],
           spent: Mapping[str, Mapping[str, Any]]) -> str:
    exp, scale = grid.exp, grid.scale
    n_seeds = len(grid.seeds)
    lines = [f"# {exp.table}: {exp.title}", "",
             f"`litebert reproduce {exp.name}` at scale **{scale.name}**, {n_seeds} seed(s) per row "
             f"({', '.join(map(str, grid.seeds))}). Made by:", "", "```bash", state.get("command", ""), "```", ""]
    missing = [f"{r} (seed {s})" for r, e in results["rows"].items() for s in grid.seeds if str(s) not in e["runs"]]
    total = len(results["rows"]) * n_seeds
    finished = total - len(missing)
    if missing:
        lines += [f"**In progress: {finished} of {total} row runs finished.** The cells and verdicts below are "
                  "those runs' alone; rerunning the command above runs the rest.", ""]
    lines += [_setup(grid, results), ""]
    reused_text, reused = _reused(results)
    lines += [reused_text, ""] if reused else []
    if spent_text := _time_spent(spent, finished - reused):
        lines += [spent_text, ""]
    if kept_text := _time_kept(grid, state, spent):
        lines += [kept_text, ""]
    if results.get("chance"):
        lines += ["Chance on the held-out pairs (the majority label): "
                  + ", ".join(f"{k.split('_')[0].upper()} {100 * v:.1f}%" for k, v in results["chance"].items()), ""]
    if exp.note:
        lines += [f"**Note.** {exp.note}", ""]
    # ours
    cols = _our_columns(grid, results)
    lines += ["## This grid", "", "| row | model (H / E / layers / sharing) | " + " | ".join(c for _, c in cols) + " |",
              "|---" * (len(cols) + 2) + "|"]
    for name, entry in results["rows"].items():
        m = entry.get("model")
        shape = (f"{m['hidden_size']} / {m['embedding_size']} / {m['num_hidden_layers']} / "
                 f"{_sharing_name(m)}" + (f", dropout {m['hidden_dropout_prob']}" if m["hidden_dropout_prob"] else "")
                 ) if m else "not run"
        lines.append(f"| {name} | {shape} | " + " | ".join(_cell(entry.get("stats"), k) for k, _ in cols) + " |")
    lines.append("")
    sources = [(name, task, s) for name, e in results["rows"].items()
               for task, s in e.get("spread_sources", {}).items()]
    if sources:
        lines += ["Where the downstream spread comes from (two-way random effects: each pretraining seed fine-tuned "
                  "with the same fine-tuning seeds, crossed; litebert.paper.stats.spread_sources). SDs of the "
                  "parts, in points; their variances add up, the SDs do not:", ""]
        lines += [f"- {name}, {task}: {s['pretraining_share']:.0%} from pretraining seeds (SD "
                  f"{100 * math.sqrt(s['pretraining_variance']):.1f}), fine-tuning SD "
                  f"{100 * math.sqrt(s['finetuning_variance']):.1f}"
                  + (f" (its seed's effect alike for every checkpoint: SD "
                     f"{100 * math.sqrt(s['finetuning_seed_variance']):.1f})" if "finetuning_seed_variance" in s else "")
                  for name, task, s in sources]
        lines.append("")
    # the paper's
    if exp.columns:
        lines += [f"## The paper ({exp.table}, quoted from {SOURCE})", "",
                  "| row | " + " | ".join(exp.columns) + " |", "|---" * (len(exp.columns) + 1) + "|"]
        for name, entry in results["rows"].items():
            lines.append(f"| {name} | " + " | ".join(str(entry['paper'].get(c, '')) for c in exp.columns) + " |")
        lines.append("")
    lines += ["## The paper's comparisons", ""] + [line for c in results["claims"] for line in _claim_lines(c)] + [""]
    if plots:
        lines += ["## Plots", ""] + [f"![{p}]({p})" for p in plots] + [""]
    if missing:
        lines += [f"**Not yet run:** {', '.join(missing)}. Rerunning the command above runs them.", ""]
    return "\n".join(lines)


def _claim_lines(c: Mapping[str, Any]) -> list[str]:
    """A judged claim in the report: its verdict, each comparison, and its proxy on held-out MLM accuracy (or
    why it has none)."""
    lines = [f"- **{c['claim']}** ({c['metric']}): **{c['verdict']}**"]
    lines += [f"  - {_pair_text(c['metric'], pair, c['kind'])}" for pair in c["pairs"]]
    if c.get("no_proxy"):
        lines.append(f"  - no proxy on held-out MLM accuracy: {c['no_proxy']}")
    if proxy := c.get("proxy"):
        lines.append(f"  - proxy, held-out MLM accuracy (not what the paper's table measures): "
                     f"**{proxy['verdict']}**")
        lines += [f"    - {_pair_text('mlm_acc', pair, proxy['kind'])}" for pair in proxy["pairs"]]
    return lines


def _sharing_name(model: Mapping[str, Any]) -> str:
    if model["sharing"] != "all":
        return {"none": "none", "attention": "attention", "ffn": "FFN"}[model["sharing"]]
    return "all" if model["num_hidden_groups"] == 1 else f"{model['num_hidden_groups']} groups"


def write_plots(grid: Grid, results: Mapping[str, Any], out_dir: str) -> list[str]:
    """curves.png (held-out MLM accuracy over steps, every experiment) and transitions.png (Figure 1)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    written = []
    runs = {name: list(e["runs"].values()) for name, e in results["rows"].items() if e["runs"]}
    if any(r.get("curve") for rs in runs.values() for r in rs):
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for name, rs in runs.items():
            steps = sorted({p[0] for r in rs for p in r["curve"]})
            series = [[dict((s, v) for s, v in r["curve"]).get(step) for r in rs] for step in steps]
            ok = [(step, [v for v in vals if v is not None]) for step, vals in zip(steps, series)]
            ok = [(step, vals) for step, vals in ok if vals]
            xs = [s for s, _ in ok]
            ax.plot(xs, [100 * sum(v) / len(v) for _, v in ok], marker=".", label=name)
            if len(rs) > 1:
                ax.fill_between(xs, [100 * min(v) for _, v in ok], [100 * max(v) for _, v in ok], alpha=0.2)
        ax.set(xlabel="step", ylabel="held-out MLM accuracy (%)",
               title=f"{grid.exp.table} ({grid.exp.name}, scale {grid.scale.name})")
        ax.legend(fontsize=8)
        fig.tight_layout()
        save_figure(fig, os.path.join(out_dir, "curves.png"), dpi=110)
        plt.close(fig)
        written.append("curves.png")
    if grid.exp.analysis == "transitions" and runs:
        fig, (ax_l2, ax_angle) = plt.subplots(1, 2, figsize=(10, 4))
        for name, rs in runs.items():
            for key, ax in (("l2", ax_l2), ("angle", ax_angle)):
                curves = [r[key] for r in rs if key in r]
                if curves:
                    mean = [sum(v) / len(v) for v in zip(*curves)]
                    ax.plot(range(1, len(mean) + 1), mean, marker="o", label=name)
        ax_l2.set(title="L2 distance, layer input -> output", xlabel="layer", ylabel="L2")
        ax_angle.set(title="angle between layer input and output", xlabel="layer", ylabel="degrees")
        ax_l2.legend()
        fig.tight_layout()
        save_figure(fig, os.path.join(out_dir, "transitions.png"), dpi=110)
        plt.close(fig)
        written.append("transitions.png")
    return written


__all__ = ["judge"]
