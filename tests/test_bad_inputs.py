"""Bad input to every command, as a hostile user would give it: no traceback, no hang past the
command's limit, the right exit code (1: the input has errors; 2: usage errors, or a folder held by
another process). The table's figures are quoted in docs/reliability.md."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SMOKE = ROOT / "evals" / "suites" / "smoke"
GOOD_PROBLEM = SMOKE / "01_gemm_tiny.py"
GOOD_PROGRAM = ROOT / "examples" / "transposed_gemm.mcu"
LIMIT_S = 90  # any single bad input; the problem-call limit below is what bounds the slow ones
PROBLEM_LIMIT_S = 4


@pytest.fixture(scope="module")
def bad(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("bad")
    files = {
        "binary": os.urandom(4096),
        "empty.py": b"",
        "empty.mcu": b"",
        "syntax.py": b"def (:\n",
        "notproblem.py": b"x = 1\n",
        "raises.py": b"raise SystemExit(3)\n",
        "latin1.mcu": "program p \xe9\xff".encode("latin-1"),
        "huge.mcu": f"program h\ninput x: f32[{2**62}, 8]\ntorch y = relu(x)\noutput y\n".encode(),
        "garbage.mcu": b"kernel kernel kernel {{{{ ))) store\n",
        "deep.mcu": ("program d\ninput x: f32[8, 8]\ntorch y = relu(" + "(" * 5000 + "x" + ")" * 5000 + ")\noutput y\n").encode(),
        "notjson.json": b"{not json",
        "binary.toml": os.urandom(2048),
        "afile": b"just a file\n",
    }
    for name, data in files.items():
        (d / name).write_bytes(data)
    tiny = GOOD_PROBLEM.read_text()
    inputs = "    return [torch.rand(M, K), torch.rand(K, N)]"
    (d / "sleeps.py").write_text(tiny.replace(inputs, "    import time; time.sleep(600)\n" + inputs))
    (d / "f64.py").write_text(tiny.replace(inputs, "    return [torch.rand(M, K).double(), torch.rand(K, N).double()]"))
    (d / "none.py").write_text(tiny.replace(inputs, "    return None"))
    # no signal stops this get_inputs: only killing the process running it does
    (d / "swallows.py").write_text(tiny.replace(inputs, "    import time\n    while True:\n        try:\n"
                                                      "            time.sleep(1)\n        except BaseException:\n"
                                                      "            pass\n" + inputs))
    # int64 inputs to a float nn.Linear: the forward fails on the problem's own inputs
    linear = (SMOKE / "02_linear_relu_tiny.py").read_text()
    int64 = linear.replace("torch.rand(batch_size, in_features)", "torch.randint(0, 5, (batch_size, in_features))")
    assert int64 != linear
    (d / "int64.py").write_text(int64)
    (d / "kb_int64" / "level1").mkdir(parents=True)
    (d / "kb_int64" / "level1" / "1_int64.py").write_text(int64)
    (d / "kb_empty" / "level1").mkdir(parents=True)  # a level folder without problems
    (d / "foreignstore").mkdir()  # another program's SQLite file where the results store would be
    sqlite3.connect(d / "foreignstore" / "results.sqlite").execute("CREATE TABLE notes (x)").connection.commit()
    (d / "folder").mkdir()
    # a results store that is not one, and one with a damaged page
    (d / "notstore").mkdir()
    (d / "notstore" / "results.sqlite").write_bytes(os.urandom(8192))
    (d / "emptystore").mkdir()
    sqlite3.connect(d / "emptystore" / "results.sqlite").execute("CREATE TABLE t (x)").connection.commit()
    # run directories: none, an empty run.json, garbage checkpoints
    (d / "run_empty").mkdir()
    (d / "run_empty" / "run.json").write_text("")
    (d / "run_garbage").mkdir()
    (d / "run_garbage" / "run.json").write_text('{"problem_path": "/nowhere.py", "settings": {"tier": "offline"}}')
    (d / "run_garbage" / "checkpoints.sqlite").write_bytes(os.urandom(4096))
    return d


# (id, argv with {d} for the bad-input folder and {tmp} for a fresh folder, expected exit code)
CASES = [
    ("optimize-missing-file", ["optimize", "{d}/nope.py"], 1),
    ("optimize-binary-problem", ["optimize", "{d}/binary", "--out", "{tmp}/r"], 1),
    ("optimize-syntax-error", ["optimize", "{d}/syntax.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-not-a-problem", ["optimize", "{d}/notproblem.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-exits-on-import", ["optimize", "{d}/raises.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-get-inputs-sleeps", ["optimize", "{d}/sleeps.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-float64-inputs", ["optimize", "{d}/f64.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-get-inputs-swallows-interrupts", ["optimize", "{d}/swallows.py", "--backend", "interpreter", "--out",
                                                 "{tmp}/r"], 1),
    ("optimize-int64-inputs", ["optimize", "{d}/int64.py", "--backend", "interpreter", "--out", "{tmp}/r"], 1),
    ("optimize-out-is-a-file", ["optimize", str(GOOD_PROBLEM), "--out", "{d}/afile"], 2),
    ("optimize-out-under-a-file", ["optimize", str(GOOD_PROBLEM), "--out", "{d}/afile/run"], 2),
    ("optimize-out-in-proc", ["optimize", str(GOOD_PROBLEM), "--out", "/proc/mucutlass-run"], 2),
    ("optimize-out-read-only", ["optimize", str(GOOD_PROBLEM), "--out", "/sys/mucutlass-run"], 2),
    ("optimize-unknown-tier", ["optimize", str(GOOD_PROBLEM), "--tier", "nosuch", "--out", "{tmp}/r"], 1),
    ("optimize-binary-tiers-file", ["optimize", str(GOOD_PROBLEM), "--tiers-file", "{d}/binary.toml", "--out", "{tmp}/r"], 1),
    ("optimize-zero-attempts", ["optimize", str(GOOD_PROBLEM), "--max-attempts", "0"], 2),
    ("optimize-bad-policy", ["optimize", str(GOOD_PROBLEM), "--policy", "forever"], 2),
    ("resume-not-a-run", ["resume", "{d}/folder"], 1),
    ("resume-missing", ["resume", "{d}/nowhere"], 1),
    ("resume-empty-run-json", ["resume", "{d}/run_empty"], 1),
    ("resume-garbage-checkpoints", ["resume", "{d}/run_garbage"], 1),
    ("check-missing", ["check", "{d}/nope.mcu"], 2),
    ("check-binary", ["check", "{d}/binary"], 1),
    ("check-empty", ["check", "{d}/empty.mcu"], 1),
    ("check-latin1", ["check", "{d}/latin1.mcu"], 1),
    ("check-garbage", ["check", "{d}/garbage.mcu"], 1),
    ("check-2-to-the-62", ["check", "{d}/huge.mcu"], 1),
    ("check-deep-nesting", ["check", "{d}/deep.mcu"], 1),
    ("check-folder", ["check", "{d}/folder"], 2),
    ("check-unknown-target", ["check", str(GOOD_PROGRAM), "--target", "sm100"], 2),
    ("check-a-problem-file", ["check", str(GOOD_PROBLEM)], 2),
    ("fmt-a-problem-file", ["fmt", str(GOOD_PROBLEM)], 2),
    ("fmt-binary", ["fmt", "{d}/binary"], 1),
    ("fmt-garbage", ["fmt", "{d}/garbage.mcu"], 1),
    ("fmt-missing", ["fmt", "{d}/nope.mcu"], 2),
    ("interpret-garbage", ["interpret", "{d}/garbage.mcu", "--problem", str(GOOD_PROBLEM)], 1),
    ("interpret-binary-problem", ["interpret", str(GOOD_PROGRAM), "--problem", "{d}/binary"], 1),
    ("interpret-problem-sleeps", ["interpret", str(GOOD_PROGRAM), "--problem", "{d}/sleeps.py"], 1),
    ("interpret-huge-program", ["interpret", "{d}/huge.mcu", "--problem", str(GOOD_PROBLEM)], 1),
    ("sol-missing", ["sol", "{d}/nope.py"], 2),
    ("sol-binary", ["sol", "{d}/binary"], 1),
    ("sol-empty-problem", ["sol", "{d}/empty.py"], 1),
    ("sol-float64-inputs", ["sol", "{d}/f64.py"], 1),
    ("sol-none-inputs", ["sol", "{d}/none.py"], 1),
    ("sol-sleeps", ["sol", "{d}/sleeps.py"], 1),
    ("sol-get-inputs-swallows-interrupts", ["sol", "{d}/swallows.py"], 1),
    ("sol-int64-inputs", ["sol", "{d}/int64.py"], 1),
    ("sol-unknown-gpu", ["sol", str(GOOD_PROBLEM), "--gpu", "nosuch"], 2),
    ("calibrate-no-gpu", ["calibrate", "--out", "{d}/afile/x.json"], 1),
    ("bench-binary", ["bench", "{d}/binary"], 1),
    ("bench-float64-row", ["bench", "{d}/f64.py"], 1),
    ("bench-sleeps", ["bench", "{d}/sleeps.py"], 1),
    ("bench-int64-row", ["bench", "{d}/int64.py"], 1),
    ("bench-nothing-named", ["bench"], 2),
    ("suite-show-unknown", ["suite", "show", "nosuch"], 1),
    ("suite-no-subcommand", ["suite"], 2),
    ("eval-unknown-suite", ["eval", "--suite", "nosuch", "--out", "{tmp}/e"], 1),
    ("eval-out-is-a-file", ["eval", "--suite", "smoke", "--out", "{d}/afile"], 2),
    ("eval-out-under-a-file", ["eval", "--suite", "smoke", "--out", "{d}/afile/ev"], 2),
    ("eval-out-in-proc", ["eval", "--suite", "smoke", "--out", "/proc/mucutlass-eval"], 2),
    ("eval-out-read-only", ["eval", "--suite", "smoke", "--out", "/sys/mucutlass-eval"], 2),
    ("eval-store-not-sqlite", ["eval", "--suite", "smoke", "--out", "{d}/notstore"], 1),
    ("eval-store-of-another-program", ["eval", "--suite", "smoke", "--out", "{d}/foreignstore"], 1),
    ("eval-int64-inputs", ["eval", "--kernelbench", "{d}/kb_int64", "--level", "1", "--backend", "interpreter",
                           "--policies", "fixed", "--max-attempts", "1", "--out", "{tmp}/e", "--no-progress"], 1),
    ("eval-empty-kernelbench-level", ["eval", "--kernelbench", "{d}/kb_empty", "--level", "1", "--out", "{tmp}/e"], 1),
    ("eval-unknown-policy", ["eval", "--suite", "smoke", "--policies", "forever", "--out", "{tmp}/e"], 2),
    ("eval-policy-parameter-it-does-not-take", ["eval", "--suite", "smoke", "--policies", "plateau:eps=1", "--out", "{tmp}/e"], 2),
    ("eval-policy-parameter-not-a-number", ["eval", "--suite", "smoke", "--policies", "sol:eps=wide", "--out", "{tmp}/e"], 2),
    ("eval-bad-kernelbench", ["eval", "--kernelbench", "{d}/folder", "--level", "1", "--out", "{tmp}/e"], 1),
    ("eval-bad-ids", ["eval", "--kernelbench", "{d}/folder", "--level", "1", "--ids", "9-1", "--out", "{tmp}/e"], 1),
    ("replay-not-a-store", ["replay", "{d}/notstore"], 1),
    ("replay-empty-store", ["replay", "{d}/emptystore"], 1),
    ("replay-bad-eps", ["replay", "{d}/notstore", "--eps", "x"], 2),
    ("report-not-a-store", ["report", "{d}/notstore"], 1),
    ("report-binary-file", ["report", "{d}/binary"], 1),
    ("report-missing", ["report", "{d}/nowhere"], 1),
    ("wheelhouse-bad-python", ["wheelhouse", "--python", "three", "--dry-run"], 2),
    ("wheelhouse-out-is-a-file", ["wheelhouse", "--out", "{d}/afile", "--dry-run"], 2),
    ("wheelhouse-binary-have", ["wheelhouse", "--have", "{d}/binary", "--dry-run"], 2),
    ("unknown-command", ["frobnicate"], 2),
]
COMMANDS = ("optimize", "resume", "check", "fmt", "interpret", "sol", "calibrate", "bench", "suite", "eval", "replay",
            "report", "wheelhouse")


def test_the_table_covers_every_command():
    assert {argv[0] for _, argv, _ in CASES} >= set(COMMANDS)


@pytest.mark.parametrize("argv, expected", [(a, e) for _, a, e in CASES], ids=[c[0] for c in CASES])
def test_bad_input(bad, tmp_path, argv, expected):
    args = [a.replace("{d}", str(bad)).replace("{tmp}", str(tmp_path)) for a in argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUCUTLASS_PROBLEM_TIME_LIMIT_S": str(PROBLEM_LIMIT_S),
           "MUCUTLASS_CACHE_DIR": str(tmp_path / "cache")}
    env.pop("OPENAI_API_KEY", None)
    try:
        done = subprocess.run([sys.executable, "-m", "mucutlass", *args], capture_output=True, text=True,
                              timeout=LIMIT_S, env=env, cwd=tmp_path, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung past {LIMIT_S} s")
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == expected, f"exit {done.returncode}\n{done.stdout[-800:]}\n{done.stderr[-800:]}"
    if expected:
        assert (done.stderr or done.stdout).strip(), "a failure says why"


def test_a_foreign_sqlite_file_is_left_as_it_was(bad, tmp_path):
    """`eval` refuses another program's SQLite file as its results store and writes nothing to it."""
    store = bad / "foreignstore" / "results.sqlite"
    before = store.read_bytes()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MUCUTLASS_PROBLEM_TIME_LIMIT_S": str(PROBLEM_LIMIT_S)}
    done = subprocess.run([sys.executable, "-m", "mucutlass", "eval", "--suite", "smoke", "--out", str(store.parent)],
                          capture_output=True, text=True, timeout=LIMIT_S, env=env, cwd=tmp_path)
    assert done.returncode == 1 and "not a mucutlass results store" in done.stderr, done.stderr
    assert store.read_bytes() == before
    assert sorted(p.name for p in store.parent.iterdir() if p.name != ".mucutlass-lock") == ["results.sqlite"]
