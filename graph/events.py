"""Progress events of a run, derived from the graph's state updates, and their two renderings:
a rich terminal line per attempt, or one JSON object per line (``--json``). While a node runs, a
``stage`` event names it ("validating attempt 3 on the interpreter"): the terminal shows it as a status
line that stays until the next event; the JSON lines leave it out."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, TextIO

from graph.state import baselines_us
from run_vocabulary.floor import cell
from run_vocabulary.policies import baseline_us

EventSink = Callable[[dict[str, Any]], None]
SETUP_FAILED = "setup failed"  # the stop reason of a run that never reached its first attempt


class EventTracker:
    """Mirrors the state from the ``updates`` stream and emits an event per finished attempt."""

    def __init__(self, emit: EventSink | None, max_attempts: int, state: dict[str, Any] | None = None,
                 progress: Callable[[dict[str, Any]], dict[str, Any]] | None = None, tier: str = "",
                 backend: str = ""):
        self.emit = emit or (lambda e: None)
        self.max_attempts = max_attempts
        self.tier, self.backend = tier, backend
        self.state: dict[str, Any] = dict(state or {})
        self.seen = len(self.state.get("attempts", []))
        # the run's counters so far (time split, kernel cache) for each attempt event, so that a run cut short
        # still says where its time went
        self.progress = progress

    def update(self, node: str, update: dict[str, Any] | None) -> None:
        if not update:
            return
        had_sol = bool(self.state.get("sol"))
        self.state.update(update)
        if not had_sol and self.state.get("sol"):
            sol = self.state["sol"]
            self.emit({"event": "setup", "problem": self.state.get("problem_name"), "t_sol_us": sol.get("t_sol_us"),
                       "bound": sol.get("bound"), "reference_us": self.state.get("reference_us", {}),
                       "reference_checks": self.state.get("reference_checks") or {},
                       "reference_reason": self.state.get("reference_reason") or "",
                       "backend": self.state.get("backend")})
        if node == "planner" and update.get("hypothesis"):
            h = update["hypothesis"]
            self.emit({"event": "plan", "hypothesis": h.get("title"), "expected_gain": h.get("expected_gain"),
                       "risk": h.get("risk"), "roi": h.get("roi"),
                       "candidates": [p.get("title") for p in update.get("plan", [])]})
        attempts = self.state.get("attempts", [])
        for a in attempts[self.seen:]:
            event = self.attempt_event(a)
            if self.progress is not None:
                event.update(self.progress(self.state))
            self.emit(event)
        self.seen = len(attempts)
        if update.get("stop_reason"):
            self.emit({"event": "stop", "reason": update["stop_reason"]})

    def started(self, node: str) -> None:
        """A node has started: a ``stage`` event saying what the run now waits for."""
        text = stage_text(node, len(self.state.get("attempts", [])) + 1, bool(self.state.get("sol")), self.tier,
                          self.backend)
        self.emit({"event": "stage", "node": node, "text": text})

    def attempt_event(self, a: dict[str, Any]) -> dict[str, Any]:
        refs = baselines_us(self.state)  # the variants that pass the tolerance
        t_sol = self.state.get("sol", {}).get("t_sol_us")
        best = self.state.get("best_t_us")
        ref = baseline_us(refs)  # the fastest of them
        return {
            "event": "attempt", "index": a["index"], "of": self.max_attempts, "hypothesis": a.get("hypothesis"),
            "reached": a.get("reached"), "correct": a.get("correct"), "t_us": a.get("t_us"),
            "failure_reason": a.get("failure_reason"), "flags": a.get("flags", []), "improved": a.get("improved"),
            "best_t_us": best, "best_speedup": (ref / best) if (ref and best) else None,
            "headroom": (best / t_sol) if (best and t_sol) else None,
            "tokens": self.state.get("tokens_in", 0) + self.state.get("tokens_out", 0),
            "cost_usd": self.state.get("cost_usd", 0.0),
            "record": a,  # the full AttemptRecord, for stores that keep every attempt as it finishes
        }


def stage_text(node: str, attempt: int, set_up: bool, tier: str, backend: str) -> str:
    """What a node does, for the status line: ``validating attempt 3 on the interpreter``."""
    on_gpu = backend == "cutlass"
    if node == "planner" and not set_up:
        return "loading the problem and counting its speed-of-light bound" + (
            "; timing the PyTorch references" if on_gpu else "")
    texts = {
        "planner": f"planning attempt {attempt}",
        "dsl_writer": f"writing attempt {attempt}" + (f" ({tier})" if tier else ""),
        "compiler": f"checking attempt {attempt}" + (" and building its kernels with nvcc" if on_gpu else ""),
        "validator": f"validating attempt {attempt} on the {'GPU' if on_gpu else 'interpreter'}",
        "profiler": f"timing attempt {attempt} on the GPU" if on_gpu else f"estimating attempt {attempt}'s time",
        "sol_judge": f"judging attempt {attempt} against the bound",
    }
    return texts.get(node, f"{node} (attempt {attempt})")


def json_lines(stream: TextIO = sys.stdout) -> EventSink:
    def emit(event: dict[str, Any]) -> None:
        if event.get("event") == "stage":  # progress is the terminal's; the JSON lines carry results
            return
        stream.write(json.dumps(event, default=str) + "\n")
        stream.flush()

    return emit


def _fmt(x: float | None, spec: str = ".3g", suffix: str = "") -> str:
    return "-" if x is None else f"{x:{spec}}{suffix}"


def rich_printer(console: Any = None) -> EventSink:
    """One line per event on the terminal: attempt n of N, best speedup, headroom, tokens; a status line naming
    the stage while a node runs (``close()`` clears it)."""
    from rich.console import Console

    from evals.progress import Status

    # soft_wrap: a line longer than the terminal is the terminal's to wrap; rich would break it mid-token, and into a
    # file or pipe (no width at all) at 80 columns
    console = console or Console(stderr=True, highlight=False, soft_wrap=True)
    status = Status(console=console)

    def emit(e: dict[str, Any]) -> None:
        kind = e["event"]
        if kind == "stage":
            status.show(e["text"])
            return
        if kind == "done":
            status.stop()
        if kind == "start":
            console.print(f"[bold]optimize[/] {e['problem']}  tier={e['tier']} policy={e['policy']} "
                          f"backend={e['backend']} ({e['backend_reason']})  -> {e['run_dir']}")
            if e.get("resumed"):
                console.print(f"  resumed after {e.get('attempts_done', 0)} finished attempts")
        elif kind == "setup":
            why = e.get("reference_reason") or ("the interpreter backend times nothing"
                                                 if e.get("backend") == "interpreter" else "no GPU timing")
            checks = e.get("reference_checks") or {}
            refs = ", ".join(f"{k} {v:.4g} us" + (f" ({cell(k, checks)})" if cell(k, checks) else "")
                             for k, v in (e.get("reference_us") or {}).items()) or f"none timed ({why})"
            console.print(f"  t_SOL {_fmt(e.get('t_sol_us'), '.4g', ' us')} ({e.get('bound')}-bound); reference: {refs}")
        elif kind == "plan":
            console.print(f"  [dim]plan:[/] {e['hypothesis']} (gain {_fmt(e.get('expected_gain'))}x, "
                          f"risk {_fmt(e.get('risk'))}, roi {_fmt(e.get('roi'))})")
        elif kind == "attempt":
            if e["correct"] and e.get("t_us") is not None:
                result = f"[green]{e['t_us']:.4g} us[/]" + (" [bold green]new best[/]" if e.get("improved") else "")
            else:
                result = f"[red]{(e.get('failure_reason') or e.get('reached') or 'failed')[:90]}[/]"
            if e.get("flags"):
                result += f" [yellow]flagged: {e['flags'][0][:60]}[/]"
            # the best as a speedup where a reference was timed, else as a time (no GPU: no reference)
            best = (_fmt(e.get("best_speedup"), ".2f", "x") if e.get("best_speedup")
                    else _fmt(e.get("best_t_us"), ".4g", " us"))
            console.print(
                f"  attempt {e['index']}/{e['of']}: {result} | best {best} "
                f"headroom {_fmt(e.get('headroom'), '.2f', 'x')} tokens {e.get('tokens', 0)} | "
                f"[dim]{(e.get('hypothesis') or '')[:60]}[/]"
            )
        elif kind == "warning":
            console.print(f"[yellow]warning:[/] {e['message']}")
        elif kind == "stop" and e["reason"].startswith(SETUP_FAILED):
            pass  # the command prints it once, as its error
        elif kind == "stop":
            console.print(f"  [bold]stop:[/] {e['reason']}")
        elif kind == "done" and not (e.get("stop_reason") or "").startswith(SETUP_FAILED):
            if e.get("model_new_error"):
                console.print(f"  no model_new.py: {e['model_new_error']}")
            console.print(f"[bold]done[/]: best {_fmt(e.get('best_t_us'), '.4g', ' us')} "
                          f"(attempt {e.get('best_index')}), {e.get('attempts')} attempts, "
                          f"{e.get('tokens')} tokens, ${e.get('cost_usd', 0):.4f}, overhead "
                          f"{_fmt(e.get('graph_overhead_s'), '.2f', ' s')} -> {e.get('run_dir')}")

    emit.close = status.stop  # type: ignore[attr-defined]
    return emit
