"""The `mucutlass` command. Each area registers its own subcommands from its `cli` module;
those modules import nothing heavy at import time, so `mucutlass --help` stays fast."""

from __future__ import annotations

import argparse
import importlib
import sys

from mucutlass import __version__

# Modules that expose `register(subparsers)`. Each handler returns an exit code:
# 0 ok, 1 the input has errors (program, problem, results), 2 usage errors.
COMMAND_MODULES = (
    "dsl_compiler.cli",   # check, fmt
    "evals.interpret",    # interpret
    "sol_models.cli",     # sol, trace, calibrate
    "evals.harness_cli",  # bench, suite
    "graph.cli",          # optimize, resume
    "evals.cli",          # eval, replay, report
    "mucutlass.wheelhouse",  # wheelhouse
)
EVAL_RUN_FN = "graph.runner:run_spec"  # what `eval` runs for each (problem, tier, policy)
TRACE_SUITE_FILES = "evals.problems:suite_files"  # how `trace --suite` finds a suite's files (suites live in evals)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mucutlass",
        description="Make PyTorch programs fast on NVIDIA Hopper GPUs with μCUTLASS kernels, guided by speed of light.",
    )
    parser.add_argument("--version", action="version", version=f"mucutlass {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that area is not installed in this build
                continue
            raise
        module.register(sub)
    if "eval" in sub.choices:
        # the evaluation runner knows no agent: this command hands it the graph's run function
        sub.choices["eval"].set_defaults(run_fn=EVAL_RUN_FN)
    if "trace" in sub.choices:
        sub.choices["trace"].set_defaults(suite_files=TRACE_SUITE_FILES)
    return parser


def _cache_root() -> str:
    import os

    if os.environ.get("MUCUTLASS_CACHE_DIR"):
        return os.environ["MUCUTLASS_CACHE_DIR"]
    import platformdirs

    return platformdirs.user_cache_dir("mucutlass")


def main(argv: list[str] | None = None) -> int:
    import os

    # torch's compile cache beside the kernel cache (inherited by workers), not in the system temp folder
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", os.path.join(_cache_root(), "inductor"))
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
