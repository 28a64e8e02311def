"""The budgeting study: an evaluation's fixed-policy logs replayed under the SOL and plateau stop rules
over a grid of margins (eps) and windows (w), beside the paper's best point.

    python3 benchmarks/budget_study.py EVAL_DIR|results.sqlite --out DIR [--eps 0.5,1,2.5] [--w 4,8,12]
                                       [--policies sol,plateau,sol+plateau] [--baseline eager_fp32]

Writes DIR/budget_study.{md,json} and two plots: budget_tradeoff.png (attempts saved against geomean
kept, one point per setting, the paper's point marked) and budget_grid.png (sol+plateau over eps x w).
The replay is ``mucutlass replay``'s (evals.replay): a fixed-policy log holds every attempt the other
rules would have made, so cutting it where a rule fires is that rule's run. What a rule saves is
counted in attempts and in wall time (the attempts' own wall time, builds included); a model tier
would also save tokens, the offline tier has none, so its budget is attempts and wall time.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# The paper's best point (its budgeting study, a model tier): eps = 250%, w = 12 saved 43% of the tokens
# and kept 96% of the geomean speedup.
PAPER = {"policy": "sol+plateau", "eps": 2.5, "w": 12, "tokens_saved": 0.43, "kept": 0.96}


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def load_logs(path: str):
    """The finished fixed-policy runs of an evaluation and its attempt budget."""
    from evals.store import ResultsStore

    store = ResultsStore.open_existing(path)
    logs = [s for s in store.summaries(statuses=("done",)) if s.policy == "fixed"]
    return logs, (store.config() or {}).get("max_attempts")


def study(logs, policies, eps, windows, baseline="eager_fp32", max_attempts=None) -> list[dict]:
    """One row per (tier, variant, setting): attempts and wall time saved, geomean kept."""
    from run_vocabulary.policies import PolicySettings
    from evals.replay import policy_grid, replay

    base = PolicySettings(max_attempts=max_attempts) if max_attempts else None
    result = replay(logs, policy_grid(policies, eps, windows, []), baseline=baseline, base_settings=base)
    by_key = {(s.tier, s.variant, s.problem): s for s in logs}
    rows = []
    for r in result.rows:
        runs = [by_key[(r.tier, r.variant, p)] for p in r.stops]
        wall_fixed = sum(a.wall_s for s in runs for a in s.attempts)
        wall_kept = sum(a.wall_s for s in runs for a in sorted(s.attempts, key=lambda a: a.index)[:r.stops[s.problem]])
        rows.append({
            "tier": r.tier, "variant": r.variant, "setting": r.setting.label, "policy": r.setting.name,
            "eps": dict(r.setting.parameters).get("eps"), "w": dict(r.setting.parameters).get("w"), "runs": r.runs, "cut_early": r.stopped_early,
            "attempts_fixed": r.attempts_fixed, "attempts_policy": r.attempts_policy, "attempts_saved": r.attempts_saved,
            "tokens_saved": r.tokens_saved, "wall_s_fixed": round(wall_fixed, 1),
            "wall_saved": (1 - wall_kept / wall_fixed) if wall_fixed > 0 else None,
            "geomean_fixed": r.geomean_fixed, "geomean_policy": r.geomean_policy, "kept": r.retention,
        })
    return rows


def _pct(x) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def markdown(rows: list[dict], source: str, max_attempts, baseline: str) -> str:
    tiers = sorted({r["tier"] for r in rows})
    by_tokens = any(r["tokens_saved"] is not None for r in rows)
    lines = [
        f"# Budgeting study: {source}", "",
        f"Fixed-policy logs of {max_attempts or '?'} attempts per run, replayed under each stop rule; geomean speedup over "
        f"{baseline}. Tiers: {', '.join(tiers)}. "
        + ("" if by_tokens else "The offline tier spends no tokens: its budget is attempts and wall time, so what a rule "
                               "saves is counted there (the paper counts tokens)."), "",
        "| tier | variant | policy | runs cut early | attempts | attempts saved | wall time saved | tokens saved | geomean (fixed -> policy) | kept |",
        "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: |",
    ]
    for r in rows:
        g = "-" if r["geomean_fixed"] is None else f"{r['geomean_fixed']:.3f} -> {r['geomean_policy']:.3f}"
        lines.append(f"| {r['tier']} | {r['variant']} | {r['setting']} | {r['cut_early']}/{r['runs']} | "
                     f"{r['attempts_policy']}/{r['attempts_fixed']} | {_pct(r['attempts_saved'])} | {_pct(r['wall_saved'])} | "
                     f"{_pct(r['tokens_saved'])} | {g} | {_pct(r['kept'])} |")
    p = PAPER
    lines.append(f"| paper | - | {p['policy']}:eps={p['eps']:g}:w={p['w']} | - | - | - | - | {_pct(p['tokens_saved'])} | - | "
                 f"{_pct(p['kept'])} |")
    same = [r for r in rows if r["policy"] == p["policy"] and r["eps"] == p["eps"] and r["w"] == p["w"]]
    for r in same:
        lines += ["", f"At the paper's point ({r['tier']}, {r['variant']}): {_pct(r['attempts_saved'])} of the attempts and "
                      f"{_pct(r['wall_saved'])} of the wall time saved, {_pct(r['kept'])} of the geomean kept "
                      f"(paper: {_pct(p['tokens_saved'])} of the tokens saved, {_pct(p['kept'])} kept)."]
    return "\n".join(lines) + "\n"


def plots(rows: list[dict], out: Path) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    written = []
    fig, ax = plt.subplots(figsize=(7, 5))
    markers = {"sol": "o", "plateau": "s", "sol+plateau": "^"}
    for policy, marker in markers.items():
        pts = [r for r in rows if r["policy"] == policy and r["kept"] is not None]
        if pts:
            ax.scatter([100 * r["attempts_saved"] for r in pts], [100 * r["kept"] for r in pts], marker=marker,
                       label=f"{policy} (attempts saved)", alpha=0.8)
            for r in pts:
                ax.annotate(r["setting"].split(":", 1)[-1], (100 * r["attempts_saved"], 100 * r["kept"]), fontsize=6,
                            xytext=(3, 3), textcoords="offset points")
    ax.scatter([100 * PAPER["tokens_saved"]], [100 * PAPER["kept"]], marker="*", s=220, color="black",
               label="paper: eps 250%, w 12 (tokens saved)")
    ax.set_xlabel("budget saved (%)")
    ax.set_ylabel("geomean speedup kept (%)")
    ax.set_title("Stop rules: budget saved against speedup kept")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "budget_tradeoff.png", dpi=120)
    plt.close(fig)
    written.append("budget_tradeoff.png")

    grid = [r for r in rows if r["policy"] == "sol+plateau" and r["eps"] is not None and r["w"] is not None]
    if grid:
        eps = sorted({r["eps"] for r in grid})
        ws = sorted({r["w"] for r in grid})
        first = (grid[0]["tier"], grid[0]["variant"])
        cell = {(r["eps"], r["w"]): r for r in grid if (r["tier"], r["variant"]) == first}
        data = [[100 * cell[(e, w)]["attempts_saved"] if (e, w) in cell else float("nan") for w in ws] for e in eps]
        fig, ax = plt.subplots(figsize=(5, 4))
        im = ax.imshow(data, cmap="viridis", origin="lower", aspect="auto")
        ax.set_xticks(range(len(ws)), [str(w) for w in ws])
        ax.set_yticks(range(len(eps)), [f"{e:g}" for e in eps])
        ax.set_xlabel("plateau window w (attempts)")
        ax.set_ylabel("SOL margin eps")
        for i, e in enumerate(eps):
            for j, w in enumerate(ws):
                r = cell.get((e, w))
                if r:
                    ax.text(j, i, f"{_pct(r['attempts_saved'])}\nkept {_pct(r['kept'])}", ha="center", va="center",
                            fontsize=7, color="white")
        fig.colorbar(im, ax=ax, label="attempts saved (%)")
        ax.set_title(f"sol+plateau, {first[0]} ({first[1]})")
        fig.tight_layout()
        fig.savefig(out / "budget_grid.png", dpi=120)
        plt.close(fig)
        written.append("budget_grid.png")
    return written


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", help="an evaluation folder or its results.sqlite")
    ap.add_argument("--out", required=True)
    ap.add_argument("--policies", default="sol,plateau,sol+plateau")
    ap.add_argument("--eps", type=_floats, default=[0.5, 1.0, 2.5])
    ap.add_argument("--w", type=_ints, default=[4, 8, 12])
    ap.add_argument("--baseline", default="eager_fp32")
    args = ap.parse_args(argv)
    from evals.store import StoreError

    try:
        logs, max_attempts = load_logs(args.results)
    except StoreError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if not logs:
        print(f"error: {args.results}: no finished fixed-policy runs to replay", file=sys.stderr)
        return 1
    rows = study(logs, args.policies.split(","), args.eps, args.w, args.baseline, max_attempts)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "budget_study.json").write_text(json.dumps({"source": str(args.results), "max_attempts": max_attempts,
                                                       "paper": PAPER, "rows": rows}, indent=1))
    md = markdown(rows, Path(args.results).name, max_attempts, args.baseline)
    written = plots(rows, out)
    (out / "budget_study.md").write_text(md + "".join(f"\n![{w}]({w})\n" for w in written))
    print(md)
    return 0


if __name__ == "__main__":
    sys.exit(main())
