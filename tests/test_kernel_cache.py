"""The kernel cache trusts only what it built: a library planted at a content-hash path is never
loaded (the entry is rebuilt), a crashed build leaves nothing behind, and two processes building
the same kernel run nvcc once. A fake nvcc (tests/test_backend_build.py) stands in for the real one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from test_backend_build import _calls, fake_toolchain  # noqa: F401 - the fixture
from test_backend_programs import program

from dsl_compiler import build
from dsl_compiler.cutlass_runtime import LibraryDigestError, load_library

ROOT = Path(__file__).resolve().parent.parent
PLANTED = b"\x7fELF planted library whose constructor must never run"


def built(prog_name="pipeline_mlp"):
    res = build.build_program(program(prog_name))
    assert res.ok, res.diagnostics
    return res


def test_a_library_planted_at_the_cache_path_is_rebuilt_not_used(fake_toolchain):
    first = built()
    so = Path(first.artifacts["fc1"])
    so.write_bytes(PLANTED)  # same path, other content: the digest no longer matches
    again = built()
    assert not again.cached and len(_calls(fake_toolchain)) == 2  # fc1 rebuilt alone, fc2 (its unit's copy) still a hit
    assert Path(again.artifacts["fc1"]).read_bytes() == b"built\n"


def test_a_planted_entry_without_a_digest_is_rebuilt(fake_toolchain):
    first = built()
    entry = Path(first.artifacts["fc2"]).parent
    (entry / build.DIGEST_FILE).unlink()
    (entry / "kernel.so").write_bytes(PLANTED)
    again = built()
    assert len(_calls(fake_toolchain)) == 2 and Path(again.artifacts["fc2"]).read_bytes() == b"built\n"


def test_the_runtime_refuses_to_load_a_library_that_fails_its_digest(fake_toolchain):
    so = Path(built().artifacts["fc1"])
    so.write_bytes(PLANTED)
    with pytest.raises(LibraryDigestError, match="digest mismatch"):
        load_library(str(so))
    with pytest.raises(build.CacheIntegrityError, match="digest mismatch"):
        build.verify_library(so)


def test_a_crashed_build_never_poisons_the_cache(fake_toolchain):
    # the first build dies half-way: its folder holds a source and no library
    (fake_toolchain / "fail").write_text("")
    res = build.build_program(program("pipeline_mlp"))
    assert not res.ok
    (fake_toolchain / "fail").unlink()
    first_ok = built()
    # an entry left half-written at the final path (a copy interrupted, a killed older version)
    entry = Path(first_ok.artifacts["fc1"]).parent
    (entry / "kernel.so").unlink()
    # a killed build's temporary folder next to it
    (entry.parent / f".{entry.name}.zz").mkdir()
    again = built()
    assert Path(again.artifacts["fc1"]).read_bytes() == b"built\n"
    assert not list(entry.parent.glob(f".{entry.name}.zz"))


_BUILD = """
import sys
sys.path[:0] = [{root!r}, {tests!r}]
from test_backend_programs import program
from dsl_compiler import build
res = build.build_program(program("pipeline_mlp"))
print(res.ok, flush=True)
"""


def test_two_processes_build_the_same_kernel_once(fake_toolchain, tmp_path):
    slow = fake_toolchain / "nvcc"
    slow.write_text(slow.read_text().replace("sleep 0.3", "sleep 2"))
    script = _BUILD.format(root=str(ROOT), tests=str(ROOT / "tests"))
    env = {**os.environ}
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env)
             for _ in range(2)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert outs == ["True", "True"]
    assert len(_calls(fake_toolchain)) == 1  # the two kernels' unit, compiled once across both processes
    for entry in (Path(os.environ["MUCUTLASS_CACHE_DIR"]) / "kernels").iterdir():
        if entry.is_dir() and not entry.name.startswith("."):
            assert json.loads((entry / build.DIGEST_FILE).read_text())["kernel.so"]
