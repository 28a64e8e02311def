"""Every prompt the graph sends to a model, in one place.

The writer's system prompt carries the whole language reference (docs/language.md, read at run
time so it never drifts from the language) and asks for exactly one program in a ```mcu block. In
the ``cuda`` variants it is KernelBench's (prompt_texts/cuda_writer.md, one worked example) and the
answer is a ModelNew module in a ```python block. Variants without SOL guidance never see the SOL
report (run_vocabulary.variants).
"""

from __future__ import annotations

import functools
from pathlib import Path

from dsl_compiler.diagnostics import PROGRAM_FILE, model_text
from dsl_compiler.printer import format_program
from run_vocabulary.variants import get_variant
from nodes.tier_types import WriterRequest

LANGUAGE_DOC = Path(__file__).resolve().parent.parent / "docs" / "language.md"
CUDA_WRITER = Path(__file__).resolve().parent / "prompt_texts" / "cuda_writer.md"

WRITER_SYSTEM = """\
You write μCUTLASS programs: a small language whose compiler emits CUTLASS 3.x kernels for NVIDIA \
Hopper GPUs (sm_90a). Given a PyTorch reference program, you write a μCUTLASS program that computes \
the same outputs (within the tolerance) as fast as possible.

Rules:
- Answer with exactly one complete program in a single ```mcu code block. Nothing after the block \
is read. A short reason before the block is fine.
- The program's inputs are the reference forward() arguments in order; parameters are bound from the \
reference model's state_dict by key.
- Do real work in kernels. A torch step is for what the language cannot express; prefer fusing \
element-wise work into a kernel's epilogue.
- Never special-case input values or skip work the reference does: results are checked on fresh \
random inputs and anything faster than the speed of light is rejected.

The language reference follows.

{language_reference}
"""

WRITER_USER = """\
# Problem: {problem_name}
Tolerance: {tolerance}. Allowed math precisions: {precisions}. Target GPU: {gpu}.

```python
{problem_source}
```

{sol_section}{memory}# Attempt {attempt_index}: {plan}

{history}{current}{diagnostics}Write the {answer} now: one ```{fence} block."""


@functools.cache
def _language_reference_cached(path: str, mtime: float) -> str:
    return Path(path).read_text()


def language_reference(path: Path = LANGUAGE_DOC) -> str:
    if not path.is_file():
        return "(The language reference docs/language.md is missing from this installation.)"
    return _language_reference_cached(str(path), path.stat().st_mtime)


def writer_system_prompt(variant: str = "dsl+sol", gpu: str = "h200") -> str:
    if get_variant(variant).language == "python":
        return CUDA_WRITER.read_text().replace("{gpu}", gpu.upper())
    return WRITER_SYSTEM.format(language_reference=language_reference())


def sol_summary(sol: dict) -> str:
    if not sol:
        return "No speed-of-light report."
    parts = [f"t_SOL = {sol.get('t_sol_us', float('nan')):.4g} us ({sol.get('bound', '?')}-bound"]
    if sol.get("intensity_flop_per_byte") is not None:
        parts.append(f", {sol['intensity_flop_per_byte']:.3g} FLOP/byte")
    parts.append(")")
    if sol.get("flops"):
        parts.append(f"; {sol['flops']:.3g} FLOPs")
    if sol.get("bytes_fused"):
        parts.append(f", {sol['bytes_fused']:.3g} bytes if fully fused")
    return "".join(parts) + "."


def history_table(request: WriterRequest, last_n: int = 8) -> str:
    rows = request.history[-last_n:]
    if not rows:
        return ""
    with_sol = get_variant(request.variant).sol_guided
    lines = ["# Previous attempts (latest last)", "| # | change | result | time us |" + (" x SOL |" if with_sol else ""),
             "|---|---|---|---|" + ("---|" if with_sol else "")]
    for a in rows:
        result = "ok" if a.correct else (a.failure_reason or a.reached)
        t = f"{a.t_us:.4g}" if a.t_us is not None else "-"
        gap = f" {a.t_us / a.t_sol_us:.2f} |" if a.t_us and a.t_sol_us else " - |"
        lines.append(f"| {a.index} | {a.hypothesis[:60]} | {result[:80]} | {t} |" + (gap if with_sol else ""))
    return "\n".join(lines) + "\n\n"


def memory_section(request: WriterRequest) -> str:
    if not request.memory:
        return ""
    return ("# Notes from attempts on earlier problems (same kind of problem)\n"
            + "\n".join(f"- {m}" for m in request.memory) + "\n\n")


def writer_user_prompt(request: WriterRequest) -> str:
    variant = get_variant(request.variant)
    fence = "mcu" if variant.language == "mcu" else "python"
    plan = request.plan.title if request.plan else "a first correct program"
    if request.plan and request.plan.rationale:
        plan += f"\n{request.plan.rationale}"
    current = ""
    best = format_program(request.best_program) if request.best_program is not None else request.best_source
    last = format_program(request.last_program) if request.last_program is not None else request.last_source
    base = best or last
    if base:
        which = "best program so far" if best else "last program"
        current = f"# The {which}: edit it\n```{fence}\n{base.strip()}\n```\n\n"
    diagnostics = ""
    filename = PROGRAM_FILE if variant.language == "mcu" else "model_new.py"
    if request.diagnostics:
        diagnostics = "# Errors of the last attempt: fix them\n" + "\n".join(model_text(d, filename) for d in request.diagnostics) + "\n\n"
    return WRITER_USER.format(
        problem_name=request.problem_name,
        tolerance=request.tolerance if request.tolerance is not None else "default",
        precisions=", ".join(request.allowed_precisions) or "f32, tf32",
        gpu=request.gpu,
        problem_source=request.problem_source.strip(),
        sol_section=f"# Speed of light\n{sol_summary(request.sol)}\n\n" if variant.sol_guided else "",
        memory=memory_section(request),
        answer="program" if variant.language == "mcu" else "ModelNew module",
        fence=fence,
        attempt_index=request.attempt_index,
        plan=plan,
        history=history_table(request),
        current=current,
        diagnostics=diagnostics,
    )


def writer_messages(request: WriterRequest) -> list[tuple[str, str]]:
    return [("system", writer_system_prompt(request.variant, request.gpu)), ("user", writer_user_prompt(request))]
