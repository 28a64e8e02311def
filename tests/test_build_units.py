"""Build throughput: problem sizes stay out of the generated C++ (one cache entry serves every shape
of a configuration), several kernels share one translation unit, the kernels of the programs expected
next are built with the current one or in the background, and a unit that nvcc rejects still builds
its good kernels. A fake nvcc stands in for the real one except in the `nvcc`-marked test."""

from __future__ import annotations

import ctypes
import os
import shutil
import stat
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from test_backend_programs import MATRIX, program

from dsl_compiler import build
from dsl_compiler.cutlass.emit import emit_program
from dsl_compiler.parser import parse

# Fails any unit holding a kernel with a 2x1x1 cluster (or $FAKE_NVCC_FAIL), the way nvcc fails on a bad static_assert.
FAKE_NVCC = textwrap.dedent("""\
    #!/bin/sh
    if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi
    out=""; prev=""; src=""
    for a in "$@"; do [ "$prev" = "-o" ] && out="$a"; prev="$a"; case "$a" in *.cu) src="$a";; esac; done
    echo "$src $(grep -c '^namespace mu_' "$src")" >> "$(dirname "$0")/calls.log"
    if grep -q "${FAKE_NVCC_FAIL:-ClusterShape = cute::Shape<cute::_2, cute::_1, cute::_1>}" "$src"; then
      line=$(grep -n "knob: cluster" "$src" | head -1 | cut -d: -f1)
      echo "$src($line): error: static assertion failed with \\"unsupported cluster shape\\"" >&2
      exit 2
    fi
    sleep ${FAKE_NVCC_S:-0.3}
    echo built > "$out"
    """)


@pytest.fixture
def nvcc_units(tmp_path, monkeypatch):
    cuda = tmp_path / "cuda"
    (cuda / "bin").mkdir(parents=True)
    nvcc = cuda / "bin" / "nvcc"
    nvcc.write_text(FAKE_NVCC)
    nvcc.chmod(nvcc.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    return cuda / "bin"


def _calls(bindir) -> list[tuple[str, int]]:
    """(source compiled, kernels in it) per nvcc run."""
    log = bindir / "calls.log"
    rows = log.read_text().splitlines() if log.exists() else []
    return [(r.split()[0], int(r.split()[1])) for r in rows]


def _variant(name: str, tile: str, cluster: str = "1x1x1"):
    text = MATRIX[name]
    assert "tile = 128x128x64" in text and "cluster = 1x1x1" in text, name
    prog, diags = parse(text.replace("tile = 128x128x64", f"tile = {tile}").replace("cluster = 1x1x1", f"cluster = {cluster}"))
    assert prog is not None, diags
    return prog


def _sources(text: str) -> list[str]:
    prog, diags = parse(text)
    assert prog is not None, diags
    emitted, diags = emit_program(prog)
    assert not diags, diags
    return [e.source for e in emitted]


# -- problem sizes stay out of the generated code ------------------------------------------------

GEMM = """program g
input x: {dt}[{m}, {k}]
param w: {dt}[{n}, {k}] = "fc.weight"
param b: {dt}[{n}] = "fc.bias"
kernel fc = gemm(x, w^T) {{
  {math}tile = 128x128x64; schedule = cooperative{extra}
  store y: {dt} = relu(acc + b[col])
}}
output y
"""

CONV = """program c
input x: f32[{n}, {c}, {h}, {h}] channels_last
param w: f32[{k}, {c}, 3, 3] channels_last = "conv.weight"
param b: f32[{k}] = "conv.bias"
kernel conv = conv2d(x, w, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {{
  math = tf32
  tile = 128x64x32
  store y: f32 = relu(acc + b[col])
}}
output y
"""


def test_two_shapes_of_one_gemm_configuration_emit_the_same_source():
    small = _sources(GEMM.format(dt="bf16", m=64, n=256, k=128, math="", extra=""))
    large = _sources(GEMM.format(dt="bf16", m=4096, n=1024, k=2048, math="", extra=""))
    assert small == large
    for size in ("4096", "2048", "1024"):  # no size of either problem is in the text
        assert size not in large[0]
    # the configuration is: another tile is another source, and another key
    other = _sources(GEMM.format(dt="bf16", m=64, n=256, k=128, math="", extra="").replace("128x128x64", "128x256x64"))
    assert other != small
    # alignment is part of the configuration: it stays in the source and the key
    narrow = _sources(GEMM.format(dt="bf16", m=64, n=256, k=128, math="", extra="; alignment = 4"))
    assert narrow != small and "cutlass::layout::RowMajor, 4," in narrow[0]
    flags = ["-O3"]
    keys = {build.cache_key(s[0], flags, "13.0.88", "4.2.0.0") for s in (small, large, other, narrow)}
    assert len(keys) == 3


def test_two_shapes_of_one_conv_configuration_emit_the_same_source():
    a = _sources(CONV.format(n=2, c=16, h=16, k=32))
    b = _sources(CONV.format(n=8, c=64, h=56, k=128))
    assert a == b


# -- several kernels in one translation unit -------------------------------------------------------

def test_a_unit_holds_each_kernel_once_with_its_own_entry_points():
    progs = [_variant("gemm_bf16_nt_coop", t) for t in ("128x128x64", "128x256x64", "256x128x64")]
    kernels = [emit_program(p)[0][0] for p in progs]
    unit = build.unit_source(kernels)
    assert unit.count('#include "cutlass/gemm/collective/collective_builder.hpp"') == 1
    for e in kernels:
        assert unit.count(f"namespace {e.namespace} {{") == 1
        assert f'extern "C" int mucutlass_run_{e.namespace}(' in unit
        assert f'extern "C" int mucutlass_workspace_size_{e.namespace}(' in unit
        assert e.abi.symbol == e.namespace
    assert 'extern "C" int mucutlass_run(' not in unit  # no two kernels export one name
    # each kernel's own source, which its cache key hashes, keeps the plain names
    assert all('extern "C" int mucutlass_run(' in e.source for e in kernels)


def test_conv_and_gemm_kernels_never_share_a_unit():
    gemm = [build._Job(emit_program(_variant("gemm_bf16_nt_coop", t))[0][0], f"g{i}", Path(f"/x/g{i}"))
            for i, t in enumerate(("128x128x64", "128x256x64"))]
    conv = [build._Job(e, f"c{i}", Path(f"/x/c{i}")) for i, e in enumerate(emit_program(program("conv2d_bf16_bias_relu"))[0])]
    units = build._units([gemm[0], conv[0], gemm[1]], per_unit=8)
    assert sorted(sorted(j.key for j in u) for u in units) == [["c0"], ["g0", "g1"]]
    # nine kernels of one family at eight a unit: two even units, not eight and one
    many = [build._Job(gemm[0].emitted, f"k{i}", Path(f"/x/k{i}")) for i in range(9)]
    assert sorted(len(u) for u in build._units(many, per_unit=8)) == [4, 5]


def test_the_programs_expected_next_are_built_in_the_same_unit(nvcc_units):
    tiles = ("128x128x64", "128x256x64", "256x128x64", "128x64x64")
    progs = [_variant("gemm_bf16_nt_coop", t) for t in tiles]
    first = build.build_program(progs[0], ahead=progs[1:])
    assert first.ok and first.kernels == 1 and first.cache_hits == 0 and first.ahead_kernels == 3
    assert _calls(nvcc_units) == [("unit.cu", 4)]
    entry = Path(first.artifacts["k0"]).parent
    assert "built in one unit with 4 kernels" in (entry / "build.log").read_text()
    build_s = first.kernel_build_s["k0"]
    for prog in progs[1:]:  # every expected program is a cache hit now: no nvcc
        res = build.build_program(prog)
        assert res.ok and res.cached and res.cache_hits == 1
        assert Path(res.artifacts["k0"]).read_bytes() == b"built\n"
    assert len(_calls(nvcc_units)) == 1
    assert 0 < build_s < 4 * 0.3 + 2  # the unit's time shared out over its kernels


def test_kernels_per_unit_bounds_a_unit(nvcc_units, monkeypatch):
    monkeypatch.setenv("MUCUTLASS_KERNELS_PER_UNIT", "2")
    progs = [_variant("gemm_bf16_nt_coop", t) for t in ("128x128x64", "128x256x64", "256x128x64", "128x64x64")]
    res = build.build_program(progs[0], ahead=progs[1:])
    assert res.ok
    build.wait_ahead(timeout_s=30)  # the unit without the program runs behind it
    assert sorted(n for _, n in _calls(nvcc_units)) == [2, 2]


def test_a_cached_program_starts_the_expected_ones_in_the_background(nvcc_units, monkeypatch):
    monkeypatch.setenv("FAKE_NVCC_S", "3")  # far longer than "at once" below, so a loaded host cannot blur the two
    progs = [_variant("gemm_bf16_nt_coop", t) for t in ("128x128x64", "128x256x64", "256x128x64")]
    assert build.build_program(progs[0]).ok
    t0 = time.perf_counter()
    res = build.build_program(progs[0], ahead=progs[1:])
    assert res.cached and time.perf_counter() - t0 < 1.5  # returns at once; the unit builds behind it
    assert res.ahead_kernels == 2
    # the attempt that needs one of them waits for that unit (its lock) and does not build it again
    nxt = build.build_program(progs[1])
    assert nxt.ok and nxt.cached and time.perf_counter() - t0 >= 3.0
    assert _calls(nvcc_units) == [("kernel.cu", 1), ("unit.cu", 2)]
    # asking for the same programs ahead again starts nothing new
    assert build.build_ahead(progs[1:]) == 0


def test_a_failing_unit_still_builds_its_good_kernels(nvcc_units):
    good = [_variant("gemm_bf16_nt_coop", t) for t in ("128x128x64", "128x256x64")]
    bad = _variant("gemm_bf16_nt_coop", "256x128x64", cluster="2x1x1")
    res = build.build_program(good[0], ahead=[bad, good[1]])
    assert res.ok  # the program itself built, alone, after its unit failed
    calls = _calls(nvcc_units)
    assert calls[0] == ("unit.cu", 3) and sorted(calls[1:]) == [("kernel.cu", 1)] * 3
    assert build.build_program(good[1]).cached
    failed = build.build_program(bad)  # its own error, from its own log: the kernel and the knob
    assert not failed.ok and "(cluster)" in failed.diagnostics[0].message
    assert "unsupported cluster shape" in failed.diagnostics[0].message


def test_a_program_the_checks_refuse_is_not_built_ahead(nvcc_units):
    from test_backend_programs import _gemm

    # K = 130 bf16: a 260-byte row breaks TMA's 16-byte rule, which the static checks report
    bad, diags = parse(_gemm("misaligned", "bf16", "x", "w", "  store y: bf16 = acc", "", k=130))
    assert bad is not None, diags
    res = build.build_program(_variant("gemm_bf16_nt_coop", "128x128x64"), ahead=[bad])
    assert res.ok and res.ahead_kernels == 0 and _calls(nvcc_units) == [("kernel.cu", 1)]


def test_the_runtime_finds_a_kernel_by_its_symbol_in_a_unit_library(tmp_path):
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.skip("no C compiler")
    from dsl_compiler.cutlass_runtime import load_library

    src = tmp_path / "u.c"
    src.write_text(textwrap.dedent("""\
        #include <stddef.h>
        int mucutlass_workspace_size_aa(void* p, void* i, void* s, size_t* b, char* m, int l) { *b = 11; return 0; }
        int mucutlass_run_aa(void* p, void* i, void* s, void* w, size_t wb, void* st, char* m, int l) { return 0; }
        int mucutlass_workspace_size_bb(void* p, void* i, void* s, size_t* b, char* m, int l) { *b = 22; return 0; }
        int mucutlass_run_bb(void* p, void* i, void* s, void* w, size_t wb, void* st, char* m, int l) { return 0; }
        int mucutlass_workspace_size(void* p, void* i, void* s, size_t* b, char* m, int l) { *b = 33; return 0; }
        int mucutlass_run(void* p, void* i, void* s, void* w, size_t wb, void* st, char* m, int l) { return 0; }
        """))
    so = tmp_path / "u.so"
    subprocess.run([cc, "-shared", "-fPIC", str(src), "-o", str(so)], check=True)

    def ws(symbol):
        out = ctypes.c_size_t(0)
        load_library(str(so), symbol).mucutlass_workspace_size(None, None, None, ctypes.byref(out), None, 0)
        return out.value

    assert (ws("aa"), ws("bb"), ws(""), ws("absent")) == (11, 22, 33, 33)


# -- a real build: one library, two shapes -------------------------------------------------------------

@pytest.mark.nvcc
@pytest.mark.gpu
def test_one_build_runs_two_shapes_like_the_interpreter(tmp_path, monkeypatch):
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no GPU")
    from dsl_compiler import interpreter
    from dsl_compiler.cutlass_runtime import CutlassExecutor

    monkeypatch.setenv("MUCUTLASS_CACHE_DIR", str(tmp_path / "cache"))
    shapes = [dict(m=256, n=384, k=128), dict(m=1000, n=512, k=320)]
    progs = [parse(GEMM.format(dt="bf16", math="", extra="", **s))[0] for s in shapes]
    first = build.build_program(progs[0])
    second = build.build_program(progs[1])
    assert first.ok and second.ok and second.cached and first.artifacts == second.artifacts
    g = torch.Generator().manual_seed(0)
    for prog, s in zip(progs, shapes):
        x = (torch.randn(s["m"], s["k"], generator=g) / s["k"] ** 0.25).to("cuda", torch.bfloat16)
        w = (torch.randn(s["n"], s["k"], generator=g) / s["k"] ** 0.25).to("cuda", torch.bfloat16)
        b = torch.randn(s["n"], generator=g).to("cuda", torch.bfloat16)
        got = CutlassExecutor(prog, second.artifacts).run_kernel(prog, prog.kernels[0], {"x": x, "w": w, "b": b})["y"]
        want = interpreter.run(prog, [x], {"w": w, "b": b})[0]
        err = ((got.double() - want.double()).norm() / want.double().norm()).item()
        assert got.shape == (s["m"], s["n"]) and err < 2e-2, (s, err)


@pytest.fixture(autouse=True)
def _quiet_ahead_pool():
    yield
    build.wait_ahead(timeout_s=30)  # builds ahead of one test finish before the next test's cache appears
    build._AHEAD.clear()


def test_a_unit_building_beside_an_attempt_is_not_taken_for_a_planted_file(nvcc_units, monkeypatch):
    """The judge's containment check reads new kernel-cache entries by name (evals.judge.sandbox.KERNEL_ENTRY):
    a unit's temporary folder, built in the background while an attempt is judged, must read as a build."""
    from evals.judge.sandbox import ProtectedTree

    monkeypatch.setenv("FAKE_NVCC_S", "1.0")
    progs = [_variant("gemm_bf16_nt_coop", t) for t in ("128x128x64", "128x256x64", "256x128x64")]
    assert build.build_program(progs[0]).ok
    cache = build.cache_dir()
    tree = ProtectedTree([(cache, False)])
    before = tree.snapshot()
    build.build_program(progs[0], ahead=progs[1:])  # returns at once; the unit builds behind it
    time.sleep(0.5)
    building = [p.name for p in cache.iterdir() if "unit" in p.name and p.is_dir()]
    assert building and tree.written(before) == []  # mid-build: nothing counts as written by the attempt
    build.wait_ahead(timeout_s=30)
    assert tree.written(before) == [] and all(build.build_program(p).cached for p in progs)
