"""The evaluation report: report.md with tables and matplotlib PNG plots, from a results store.

With LangSmith configured (LANGSMITH_API_KEY and LANGSMITH_ENDPOINT), one experiment per tier and
policy is uploaded as well; nothing is sent otherwise.
"""

from __future__ import annotations

import datetime as _dt
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path

from evals import metrics
from evals.replay import ReplayError, fmt_num, fmt_pct, policy_grid, replay, replay_table_markdown
from evals.environment import versions_text
from run_vocabulary.budgets import BUDGET_STOP_PREFIX
from run_vocabulary.policies import PolicySettings

DEFAULT_EPS = (0.5, 1.0, 2.5)
DEFAULT_WINDOWS = (4, 8, 12)
ATTEMPT_FAST_P = 0.95  # Attempt-Fast-p's default p: the paper's "keeps >= 95% of the geomean"
PLOT_BASELINE = "eager_tf32"  # the honest baseline on GEMMs (kernelbench-facts: TF32 alone is 4.6x on eager)


def _md_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    lines += ["| " + " | ".join(str(c).replace("|", "\\|") for c in row) + " |" for row in rows]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------
# Plots (matplotlib, headless)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _legend(ax) -> None:
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend(fontsize=8)


def _plain_log_y(ax) -> None:
    """Log scale labelled 0.1, 0.2, 0.5, 1, 2, 5, 10 (plain numbers, three per decade, unlabelled minor ticks) so
    labels never overlap, whatever the range."""
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _figure():
    return _pyplot().subplots(figsize=(6, 4))


def no_data_reason(results: Sequence[metrics.ProblemResult], baseline: str) -> str:
    """Why a plot over ``baseline`` speedups has nothing to draw."""
    if not any(baseline in r.speedups for r in results):
        return f"no {baseline} time was measured (timings need a GPU)"
    return f"no correct result with a {baseline} speedup"


def _save(fig, ax, title: str, path: Path, empty: str | None = None) -> Path:
    """Legend, title, and the PNG written at ``path``. ``empty``: why the plot has no data, said in its title."""
    _legend(ax)
    if empty:
        title = f"{title}\nno data: {empty}"
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes, color="0.4", fontsize=14)
    ax.set_title(title, fontsize=11)
    fig.tight_layout()
    fig.savefig(path, dpi=120, metadata={"Title": title.replace("\n", " ")})  # the title, readable without viewing
    _pyplot().close(fig)
    return path


def plot_fast_p(groups: dict[tuple[str, str], list[metrics.ProblemResult]], baseline: str, path: Path) -> Path:
    fig, ax = _figure()
    results = [r for rs in groups.values() for r in rs]
    top = max([r.speedups.get(baseline, 0) for rs in groups.values() for r in rs] + [2.5])
    ps = [i * top / 200 for i in range(201)]
    for key, rs in sorted(groups.items()):
        ax.plot(ps, [metrics.fast_p(rs, p, baseline) for p in ps], label=" / ".join(key))
    for p in metrics.FAST_P_THRESHOLDS:
        ax.axvline(p, color="0.85", lw=0.8, zorder=0)
    ax.set_xlabel(f"speedup threshold p (over {baseline})")
    ax.set_ylabel("fast_p (fraction of all problems)")
    ax.set_ylim(0, 1.02)
    has_data = any(r.counts and baseline in r.speedups for r in results)
    return _save(fig, ax, "fast_p: correct and faster than p", path,
                 None if has_data else no_data_reason(results, baseline))


def plot_speedup_vs_sol(results: Sequence[metrics.ProblemResult], baseline: str, path: Path) -> Path:
    fig, ax = _figure()
    drawn = 0
    for key, rs in sorted(metrics.by_group(results).items()):
        pts = [(100 * r.sol_fraction, r.speedups[baseline]) for r in rs
               if r.counts and r.sol_fraction and baseline in r.speedups]
        if pts:
            ax.scatter(*zip(*pts), label=" / ".join(key), s=18, alpha=0.8)
            drawn += len(pts)
    flagged = [(100 * r.sol_fraction, r.speedups[baseline]) for r in results
               if r.flagged and r.sol_fraction and baseline in r.speedups]
    if flagged:
        ax.scatter(*zip(*flagged), marker="x", color="red", label="flagged (not counted)")
        drawn += len(flagged)
    ax.axvline(100, color="0.5", ls="--", lw=0.8)
    ax.axhline(1, color="0.5", ls=":", lw=0.8)
    ax.set_xlabel("% of speed of light (t_SOL / t)")
    ax.set_ylabel(f"speedup over {baseline}")
    _plain_log_y(ax)
    return _save(fig, ax, "per problem: speedup against % of SOL", path,
                 None if drawn else no_data_reason(results, baseline))


def plot_spend_vs_speedup(results: Sequence[metrics.ProblemResult], baseline: str, path: Path) -> Path:
    fig, ax = _figure()
    use_tokens = any(r.tokens for r in results)
    drawn = 0
    for key, rs in sorted(metrics.by_group(results).items()):
        pts = [(r.tokens if use_tokens else r.attempts, r.speedups[baseline]) for r in rs
               if r.counts and baseline in r.speedups]
        if pts:
            ax.scatter(*zip(*pts), label=" / ".join(key), s=18, alpha=0.8)
            drawn += len(pts)
    ax.set_xlabel("tokens per problem" if use_tokens else "attempts per problem (tiers without tokens)")
    ax.set_ylabel(f"speedup over {baseline}")
    _plain_log_y(ax)
    return _save(fig, ax, "spend against speedup, per tier and policy", path,
                 None if drawn else no_data_reason(results, baseline))


def plot_attempt_curves(groups: dict[tuple[str, str], metrics.GroupMetrics], baseline: str, path: Path,
                        results: Sequence[metrics.ProblemResult] = ()) -> Path:
    fig, ax = _figure()
    for key, g in sorted(groups.items()):
        curve = g.attempt_curve[baseline]
        if curve:
            ax.step(range(1, len(curve) + 1), curve, where="post", label=" / ".join(key))
    ax.set_xlabel("attempts")
    ax.set_ylabel(f"fraction of problems >= {metrics.ATTEMPT_CURVE_THRESHOLD:g}x over {baseline}")
    ax.set_ylim(0, 1.02)
    has_data = any(r.counts and baseline in r.speedups for r in results)
    return _save(fig, ax, "attempt curves", path, None if has_data else no_data_reason(results, baseline))


def plot_attempt_fast_p(curves: dict[tuple[str, str, str], list[float]], p: float, path: Path) -> Path:
    """The paper's Attempt-Fast-p: per policy, the fraction of problems within ``p`` of their final speedup
    after n attempts."""
    fig, ax = _figure()
    for key, curve in sorted(curves.items()):
        if curve:
            ax.step(range(1, len(curve) + 1), curve, where="post", label=" / ".join(key))
    ax.set_xlabel("attempts n")
    ax.set_ylabel(f"fraction of problems at >= {p:g} of their final speedup")
    ax.set_ylim(0, 1.02)
    drawn = any(any(c) for c in curves.values())
    return _save(fig, ax, f"Attempt-Fast-p (p = {p:g}), per policy", path,
                 None if drawn else "no correct timed result")


def spend_tables_markdown(live) -> str:
    """Tokens, dollars and minutes of work of the live runs (derived ones are cuts of them), per tier, per
    variant and per node of the graph."""
    parts = []
    for by, title in (("tier", "tier"), ("variant", "variant"), ("node", "node (planner, writer)")):
        rows = metrics.spend_rows(live, by)
        parts += [f"Per {title}:", "", _md_table(
            [by, "runs", "tokens", "cost", "minutes"],
            [[r.key, r.runs, r.tokens, f"${r.cost_usd:.4f}", f"{r.minutes:.2f}"] for r in rows]), ""]
    return "\n".join(parts).rstrip()


# ------------------------------------------------------------------------------------------------


def variants_tables_markdown(summaries, policy: str = "fixed") -> str:
    """The paper's comparison: rows tiers, columns variants; each cell the geomean speedup over eager
    fp32 and over eager TF32, the correct count, and tokens and cost per problem; then the attempts to
    the first correct result per variant."""
    cells = {(c.tier, c.variant): c for c in metrics.variant_cells(summaries, policy)}
    if not cells:
        return ""
    tiers = sorted({t for t, _ in cells})
    from run_vocabulary.variants import VARIANTS

    variants = [v for v in VARIANTS if any(k[1] == v for k in cells)] + sorted(
        {v for _, v in cells} - set(VARIANTS))

    def cell(c) -> str:
        if c is None:
            return "not run"
        speed = " / ".join(fmt_num(c.geomean_speedup[b], ".2f", "x") for b in ("eager_fp32", "eager_tf32"))
        return (f"{speed}; {c.correct}/{c.problems} correct; {c.tokens_per_problem / 1000:.1f}k tok, "
                f"${c.cost_usd_per_problem:.3f} per problem")

    def firsts(c) -> str:
        if c is None:
            return "not run"
        if c.attempts_to_first_correct_mean is None:
            return f"none correct (0/{c.problems})"
        return (f"{c.attempts_to_first_correct_mean:.1f} (median {c.attempts_to_first_correct_median:g}; "
                f"{c.correct}/{c.problems} runs)")

    md = [f"Runs of the `{policy}` policy (the same attempt budget for every variant). Each cell: geomean speedup "
          "over eager fp32 / over eager TF32 (correct, unflagged results with a time), correct count (a correct, "
          "unflagged attempt), tokens and cost per problem. `-`: no correct result with a timed baseline.", ""]
    md.append(_md_table(["tier", *variants], [[t, *[cell(cells.get((t, v))) for v in variants]] for t in tiers]))
    md += ["", "Attempts to the first correct result (mean over the runs that reached one):", ""]
    md.append(_md_table(["tier", *variants], [[t, *[firsts(cells.get((t, v))) for v in variants]] for t in tiers]))
    return "\n".join(md)


def build_report(store, out_dir: str | Path, attempt_p: float = ATTEMPT_FAST_P) -> str:
    """Markdown text of the report; plots are written next to it. ``attempt_p``: the p of Attempt-Fast-p."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summaries = store.summaries()
    config = store.config() or {}
    env = store.environment()
    derived = store.derived_policies()
    failures = store.failures()
    results = [metrics.result_from_summary(s) for s in summaries]
    groups_results = metrics.by_group(results)
    groups = {k: metrics.group_metrics(v) for k, v in groups_results.items()}
    timing_sources = metrics.timing_sources(summaries)

    md = ["# mucutlass evaluation report", ""]
    source = config.get("source", {})
    md.append(f"- problems: {len(config.get('problems', []))} ({', '.join(f'{k}={v}' for k, v in source.items() if v is not None)})")
    md.append(f"- tiers: {', '.join(config.get('tiers', []))}; policies: {', '.join(config.get('policies', []))}; "
              f"budget: {config.get('max_attempts')} attempts per run")
    md.append(f"- GPU: {env.get('gpu')}; backend: {env.get('backend')}; host: {env.get('host')}")
    md.append("- versions: " + versions_text(env))
    md.append(f"- report written {_dt.datetime.now(_dt.timezone.utc).isoformat(timespec='seconds')}")
    if "estimate" in timing_sources:
        md.append("- **timings are SOL-model estimates (no GPU was used)**: speedups here rank configurations, "
                  "they are not measurements")
    if derived:
        md.append("- " + "; ".join(f"policy `{p}` was derived by replaying the `{src}` logs" for p, src in derived.items())
                  + " (its stop rule is a pure function of the attempt history, so the cut log is exactly the run "
                  "that policy would have made)")
    md.append("- headline numbers count correct results without integrity flags; flagged results are counted beside "
              "them and listed below")
    if any(not (g.tokens) for g in groups.values()):
        md.append("- tiers that used no tokens are compared by attempts in place of tokens")
    md.append("")

    if not results:
        md += ["No finished runs yet.", ""]
        return "\n".join(md)

    md += ["## Headline", ""]
    rows = []
    for (tier, variant, policy), g in sorted(groups.items()):
        rows.append([
            tier, variant, policy, g.total, g.correct, g.flagged,
            *[fmt_num(g.geomean_speedup[b], ".3f", "x") for b in metrics.BASELINES],
            *[fmt_num(g.median_speedup[b], ".3f", "x") for b in metrics.BASELINES],
            fmt_pct(g.geomean_sol_fraction), g.attempts, g.tokens, f"${g.cost_usd:.2f}",
        ])
    md.append(_md_table(
        ["tier", "variant", "policy", "problems", "correct", "flagged",
         *[f"geomean vs {b}" for b in metrics.BASELINES], *[f"median vs {b}" for b in metrics.BASELINES],
         "geomean % SOL", "attempts", "tokens", "cost"], rows))
    md.append("")

    variants_md = variants_tables_markdown(summaries)
    if variants_md:
        md += ["## Agent variants", "", variants_md, ""]

    md += ["## fast_p", "", "fast_p = (correct and speedup > p) / all problems; fast_0 is the correctness rate.", ""]
    for b in metrics.BASELINES:
        md += [f"Over {b}:", ""]
        md.append(_md_table(["tier", "variant", "policy", *[f"fast_{p:g}" for p in metrics.FAST_P_THRESHOLDS]],
                            [[t, v, p, *[fmt_pct(g.fast_p[b][x]) for x in metrics.FAST_P_THRESHOLDS]]
                             for (t, v, p), g in sorted(groups.items())]))
        md.append("")

    comparisons = [metrics.compare_to_fixed(g, groups[(t, v, "fixed")]) for (t, v, p), g in sorted(groups.items())
                   if p != "fixed" and (t, v, "fixed") in groups]
    if comparisons:
        md += ["## Policies against the fixed budget", ""]
        md.append(_md_table(
            ["tier", "variant", "policy", "retention (geomean vs eager_fp32)", "spend saved", "attempts saved", "efficiency gain"],
            [[c.tier, c.variant, c.policy, fmt_pct(c.retention), f"{fmt_pct(c.spend_saved)} of {c.spend_unit}", fmt_pct(c.attempts_saved),
              fmt_num(c.efficiency_gain, ".2f", "x") + ("" if c.spend_unit == "tokens" else " (by attempts)")]
             for c in comparisons]))
        md.append("")

    logs = [s for s in summaries if s.policy == "fixed"]  # the logs other policies replay from
    if logs:
        try:
            grid = policy_grid(["sol", "plateau", "sol+plateau"], DEFAULT_EPS, DEFAULT_WINDOWS)
            base = PolicySettings(max_attempts=config["max_attempts"]) if config.get("max_attempts") else None
            table = replay_table_markdown(replay(logs, grid, base_settings=base))
            md += ["## Budgeting study (replay of the fixed logs)", "",
                   f"eps in {', '.join(map(str, DEFAULT_EPS))}, w in {', '.join(map(str, DEFAULT_WINDOWS))}; "
                   "`mucutlass replay` runs other grids.", "", table, ""]
        except ReplayError as exc:
            md += [f"(replay skipped: {exc})", ""]

    live = store.summaries(statuses=("done",))
    if live:
        md += ["## Spend", "", "Budgets (`--budget-usd`, `--budget-tokens`, `--budget-minutes`) count these: "
               "model tokens, their dollars at the tier's prices, minutes of work (model calls, builds, validation, "
               "timing, set-up).", "", spend_tables_markdown(live), ""]
        stopped = [s for s in live if s.stop_reason.startswith(BUDGET_STOP_PREFIX)]
        if stopped:
            md += [f"{len(stopped)} run(s) stopped on a budget, their best so far kept: "
                   + "; ".join(f"{s.problem} [{s.tier}, {s.policy}]: {s.stop_reason}" for s in stopped), ""]

    plots = [
        ("Attempt-Fast-p per policy", plot_attempt_fast_p(
            metrics.attempt_fast_p(summaries, attempt_p, config.get("max_attempts")), attempt_p,
            out / "attempt_fast_p.png")),
        ("fast_p curves", plot_fast_p(groups_results, PLOT_BASELINE, out / "fast_p.png")),
        ("per-problem speedup against % of SOL", plot_speedup_vs_sol(results, PLOT_BASELINE, out / "speedup_vs_sol.png")),
        ("spend against speedup", plot_spend_vs_speedup(results, PLOT_BASELINE, out / "spend_vs_speedup.png")),
        ("attempt curves", plot_attempt_curves(groups, "eager_fp32", out / "attempt_curves.png", results)),
    ]
    md += ["## Plots", ""]
    md += [f"![{title}]({p.name})" for title, p in plots]
    md.append("")

    md += ["## Per problem", ""]
    rows = []
    for s, r in zip(summaries, results):
        rows.append([
            s.problem, s.tier, s.variant, s.policy, "yes" if r.correct else "no",
            *[fmt_num(r.speedups.get(b), ".2f", "x") for b in metrics.BASELINES],
            fmt_pct(r.sol_fraction), r.precision or "", r.attempts, r.tokens, ", ".join(r.flags) or "", s.stop_reason,
        ])
    # % SOL is t_SOL at TF32 over the kernel's time: a kernel computing in f16 or bf16 may pass 100% honestly
    md.append(_md_table(["problem", "tier", "variant", "policy", "correct", *[f"vs {b}" for b in metrics.BASELINES],
                         "% SOL (TF32)", "precision", "attempts", "tokens", "flags", "stop reason"], rows))
    md.append("")

    flagged = [r for r in results if r.flagged]
    md += ["## Integrity", ""]
    if flagged:
        md.append(f"{len(flagged)} result(s) carry integrity flags and are out of the headline numbers:")
        md.append("")
        md += [f"- {r.problem} [{r.tier}, {r.variant}, {r.policy}]: {'; '.join(r.flags)}" for r in flagged]
        md.append("")
        md.append(_md_table(["tier", "variant", "policy",
                             *[f"geomean vs {b} if flagged counted" for b in metrics.BASELINES]],
                            [[t, v, p, *[fmt_num(g.geomean_speedup_with_flagged[b], ".3f", "x") for b in metrics.BASELINES]]
                             for (t, v, p), g in sorted(groups.items()) if g.flagged]))
    else:
        md.append("No result carries an integrity flag.")
    md.append("")
    if failures:
        md += ["## Failed runs (retried on resume)", ""]
        md += [f"- {'/'.join(k)}: {e}" for k, e in sorted(failures.items())]
        md.append("")
    return "\n".join(md)


def write_report(store, out_dir: str | Path, attempt_p: float = ATTEMPT_FAST_P) -> Path:
    out = Path(out_dir)
    text = build_report(store, out, attempt_p)
    path = out / "report.md"
    path.write_text(text + "\n", encoding="utf-8")
    if langsmith_configured():
        try:
            upload_to_langsmith(store)
        except Exception as exc:  # the report is written; an unreachable endpoint must not undo that
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            print(f"warning: LangSmith upload to {os.environ.get('LANGSMITH_ENDPOINT')} failed "
                  f"({type(exc).__name__}: {first}); the report is written", file=sys.stderr)
    return path


# ------------------------------------------------------------------------------------------------
# LangSmith


def langsmith_configured() -> bool:
    return bool(os.environ.get("LANGSMITH_API_KEY") and os.environ.get("LANGSMITH_ENDPOINT"))


def upload_to_langsmith(store, client=None, dataset_name: str | None = None) -> list[str]:
    """One experiment (a project tied to the problems' dataset) per tier and policy; one run per problem
    with its outputs and the speedups as feedback. Returns the experiment names."""
    from langsmith import Client

    client = client or Client(api_key=os.environ["LANGSMITH_API_KEY"], api_url=os.environ["LANGSMITH_ENDPOINT"],
                              auto_batch_tracing=False)  # a few runs per experiment: send each at once
    config = store.config() or {}
    env = store.environment()
    source = config.get("source", {})
    dataset_name = dataset_name or "mucutlass-" + "-".join(str(v) for v in source.values() if v is not None)
    summaries = store.summaries()
    if client.has_dataset(dataset_name=dataset_name):
        dataset = client.read_dataset(dataset_name=dataset_name)
        examples = {e.inputs.get("problem"): e.id for e in client.list_examples(dataset_id=dataset.id)}
    else:
        dataset = client.create_dataset(dataset_name, description="mucutlass evaluation problems")
        examples = {}
    for problem in sorted({s.problem for s in summaries} - set(examples)):
        examples[problem] = client.create_example(inputs={"problem": problem}, dataset_id=dataset.id,
                                                  example_id=uuid.uuid4()).id
    stamp = _dt.datetime.now(_dt.timezone.utc).strftime("%Y%m%dT%H%M%S")
    names = []
    for (tier, variant, policy), runs in sorted(metrics.by_group(summaries).items()):
        name = f"mucutlass-{tier}-{variant}-{policy}-{stamp}"
        project = client.create_project(name, reference_dataset_id=dataset.id,
                              metadata={"tier": tier, "variant": variant, "policy": policy, "gpu": env.get("gpu"),
                                        "max_attempts": config.get("max_attempts")})
        for s in runs:
            r = metrics.result_from_summary(s)
            run_id = uuid.uuid4()
            end = _dt.datetime.now(_dt.timezone.utc)
            client.create_run(
                name="optimize", run_type="chain", id=run_id, project_name=name,
                inputs={"problem": s.problem}, reference_example_id=examples.get(s.problem),
                outputs={"correct": r.correct, "speedups": r.speedups, "sol_fraction": r.sol_fraction,
                         "flags": r.flags, "attempts": r.attempts, "stop_reason": s.stop_reason},
                start_time=end - _dt.timedelta(seconds=s.wall_s), end_time=end,
                extra={"metadata": {"tier": tier, "variant": variant, "policy": policy}},
            )
            scores = {"correct": float(r.counts), **{f"speedup_vs_{b}": v for b, v in r.speedups.items()}}
            for key, score in scores.items():
                client.create_feedback(run_id, key=key, score=score, session_id=project.id, start_time=end)
        names.append(name)
    client.flush()
    return names

