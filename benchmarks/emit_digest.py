"""A digest of the C++ the CUTLASS emitters write for every program the GPU checks build: the
examples, the backend test matrix, bench_backend's cases and the offline tier's candidates for
every built-in suite. Run it before and after a change that must not change the emitted code and
compare the two files (byte-identical C++ gives identical digests):

    python benchmarks/emit_digest.py --out /tmp/before.json   # on the old commit
    python benchmarks/emit_digest.py --out /tmp/after.json    # on the new one
    cmp /tmp/before.json /tmp/after.json
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "benchmarks")]

from dsl_compiler.cutlass.emit import emit_program  # noqa: E402
from dsl_compiler.parser import parse  # noqa: E402

SUITES = ("builtin", "builtin-large", "builtin-strict", "smoke")


def digest(program) -> str:
    """sha256 over every emitted kernel (name, namespace, source, ABI, knobs) and every diagnostic."""
    emitted, diagnostics = emit_program(program)
    h = hashlib.sha256()
    for k in emitted:
        for part in (k.kernel_name, k.namespace, k.source, repr(k.abi), repr(sorted(k.knobs.items()))):
            h.update(part.encode())
    for d in diagnostics:
        h.update(d.code.encode() + d.message.encode())
    return h.hexdigest()


def programs():
    """(label, program text) of every program the digest covers."""
    for path in sorted((ROOT / "examples").glob("*.mcu")):
        yield f"examples/{path.name}", path.read_text()
    from bench_backend import CASES
    from test_backend_programs import MATRIX

    yield from ((f"bench_backend:{name}", text) for name, text in CASES.items())
    yield from ((f"matrix:{name}", text) for name, text in MATRIX.items())
    from evals.problems import load_suite
    from nodes.offline.policy import OfflineTier

    for suite in SUITES:
        for problem in load_suite(suite):
            for i, c in enumerate(OfflineTier(use_record=False).candidates(problem, "h200")):
                yield f"offline:{suite}:{problem.name}:{i}:{c.title}", c.program_text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file: label -> digest")
    args = ap.parse_args(argv)
    digests = {}
    for label, text in programs():
        program, _ = parse(text)
        digests[label] = digest(program) if program is not None else "does not parse"
    Path(args.out).write_text(json.dumps(digests, indent=0, sort_keys=True) + "\n")
    print(f"{len(digests)} programs -> {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
