"""Build a program's kernels: emit C++, run nvcc for sm_90a, cache by content hash.

Each kernel is cached on its own, keyed by its source (which holds no problem sizes: CUTLASS takes
them at run time, so one entry serves every shape of a configuration and epilogue), the flags,
nvcc's version and the CUTLASS version, under ``$MUCUTLASS_CACHE_DIR`` (else the user cache
directory): ``<cache>/kernels/<key>/{kernel.cu, kernel.so, build.log, abi.json, digest.json}``.
nvcc compiles several kernels per translation unit (the kernels of a program and of the programs
expected next, ``ahead``), since a unit's front-end time is most of its cost; units run side by side
in a thread pool (one nvcc process each), and the library of a unit is copied into each of its
kernels' entries (each kernel keeps its own entry points, ``KernelAbi.symbol``). When a program is
cached already, the expected programs are built in the background while the caller validates it.
nvcc's errors come back as one short Diagnostic naming the kernel and the knob (a unit that fails is
built again one kernel at a time, so the error is the failing kernel's); the raw log stays in the cache.

The cache is trusted only as far as it checks out: ``digest.json`` records the SHA-256 of the library
and its source when nvcc produced them, and an entry whose files do not match (a library planted or
swapped at the content-hash path, a half-written entry) is moved aside and rebuilt; the runtime
verifies the same digest before it loads a library. A build happens in a temporary folder and is
moved into place whole, so a crashed build leaves no entry behind; builders of the same kernel take
a file lock on it, so two processes (or a build ahead and the attempt that needs it) build it once.
"""

from __future__ import annotations

import atexit
import dataclasses
import fcntl
import functools
import glob
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from dsl_compiler import fused_cast
from dsl_compiler.diagnostics import Diagnostic, has_errors
from dsl_compiler.cutlass.emit import EmittedKernel, emit_program
from dsl_compiler.ir import Program
from dsl_compiler.run_settings import runtime_setting

TARGETS = {"sm90a": "-gencode=arch=compute_90a,code=sm_90a"}
BASE_FLAGS = ("-std=c++17", "-O3", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC", "-shared", "-DNDEBUG")
NVCC_TIMEOUT_S = 900


class BuildResult(BaseModel):
    ok: bool
    diagnostics: list[Diagnostic] = Field(default_factory=list)
    artifacts: dict[str, str] = Field(default_factory=dict)  # kernel name -> path of the .so
    sources: dict[str, str] = Field(default_factory=dict)  # kernel name -> path of the .cu
    seconds: float = 0.0
    cached: bool = False  # every kernel came from the cache
    kernel_build_s: dict[str, float] = Field(default_factory=dict)  # 0.0 for a cache hit; a unit's time shared out
    kernels: int = 0  # kernels of the program
    cache_hits: int = 0  # of them, found built (in the cache, or by a build ahead that finished first)
    ahead_kernels: int = 0  # kernels of expected programs built with this one or started in the background


class ToolchainError(Exception):
    pass


def cache_dir() -> Path:
    root = os.environ.get("MUCUTLASS_CACHE_DIR")
    if not root:
        import platformdirs

        root = platformdirs.user_cache_dir("mucutlass")
    return Path(root) / "kernels"


def _nvcc_candidates():
    for var in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(var):
            yield os.path.join(os.environ[var], "bin", "nvcc")
    yield shutil.which("nvcc")
    yield "/usr/local/cuda/bin/nvcc"
    for site in sys.path:  # the nvidia-cuda-nvcc wheel
        yield from sorted(glob.glob(os.path.join(site, "nvidia", "*", "bin", "nvcc")))


def find_nvcc() -> str:
    """nvcc from CUDA_HOME, PATH, /usr/local/cuda, or the nvidia-cuda-nvcc wheel."""
    for c in _nvcc_candidates():
        if c and os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    raise ToolchainError("nvcc not found: set CUDA_HOME, put nvcc on PATH, or `pip install nvidia-cuda-nvcc`")


@functools.lru_cache(maxsize=None)
def nvcc_version(nvcc: str) -> str:
    """nvcc's version, remembered on disk per binary (path, size, mtime): a cache hit runs no subprocess."""
    st = os.stat(nvcc)
    ident = f"{os.path.realpath(nvcc)}:{st.st_size}:{st.st_mtime_ns}"
    memo = cache_dir() / "toolchain.json"
    try:
        known = json.loads(memo.read_text())
    except (OSError, ValueError):
        known = {}
    if ident in known:
        return known[ident]
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"release [\d.]+, V([\d.]+)", out)
    version = m.group(1) if m else (out.strip().splitlines()[-1] if out.strip() else "unknown")
    known[ident] = version
    try:
        memo.parent.mkdir(parents=True, exist_ok=True)
        tmp = memo.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(known))
        os.replace(tmp, memo)
    except OSError:
        pass
    return version


@functools.lru_cache(maxsize=None)
def cutlass_root() -> Path:
    """The C++ headers inside the nvidia-cutlass wheel (located without importing it)."""
    import importlib.util

    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        raise ToolchainError("the CUTLASS headers come from the nvidia-cutlass wheel: `pip install nvidia-cutlass==4.2.0.0`")
    root = Path(list(spec.submodule_search_locations)[0]) / "source"
    if not (root / "include" / "cutlass" / "cutlass.h").exists():
        raise ToolchainError(f"nvidia-cutlass is installed but has no C++ headers under {root}")
    return root


@functools.lru_cache(maxsize=None)
def cutlass_version() -> str:
    from importlib import metadata

    try:
        return metadata.version("nvidia-cutlass")
    except metadata.PackageNotFoundError:
        return "unknown"


def nvcc_flags(target: str = "sm90a") -> list[str]:
    """nvcc's flags; ``MUCUTLASS_NVCC_FLAGS`` adds to them (part of the cache key, like every flag)."""
    root = cutlass_root()
    extra = os.environ.get("MUCUTLASS_NVCC_FLAGS", "").split()
    return [TARGETS[target], *BASE_FLAGS, *extra, f"-I{root / 'include'}", f"-I{root / 'tools' / 'util' / 'include'}"]


def cache_key(source: str, flags: list[str], nvcc_ver: str, cutlass_ver: str) -> str:
    # Include paths differ between machines; they are not part of what is built.
    portable = [f for f in flags if not f.startswith("-I")]
    blob = json.dumps({"source": source, "flags": portable, "nvcc": nvcc_ver, "cutlass": cutlass_ver})
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


# Keywords of CUTLASS static_asserts and nvcc messages -> the program's knob they concern.
_KNOB_PATTERNS = [
    ("schedule", r"[Cc]ooperative|[Pp]ingpong|KernelSchedule|schedule"),
    ("cluster", r"[Cc]luster"),
    ("stages", r"StageCount|[Ss]tages|shared memory|[Ss]mem|too much shared data"),
    ("tile", r"[Tt]ile|TileShape|divisible|[Mm]ultiple of"),
    ("alignment", r"[Aa]lign"),
    ("decomposition", r"StreamK|[Ss]plit|[Ss]cheduler"),
    ("math", r"tf32|TF32|[Ee]lement|MMA|[Tt]ype"),
]


def map_nvcc_error(log: str, emitted: EmittedKernel) -> tuple[str, str]:
    """(knob, first error line) for an nvcc failure log."""
    lines = log.splitlines()
    errors = [ln for ln in lines if "error" in ln]
    first = errors[0] if errors else (lines[-1] if lines else "nvcc failed")
    msg = re.sub(r"^.*?error[^:]*:\s*", "", first).strip()
    for knob, pat in _KNOB_PATTERNS:  # the message itself names the knob most reliably
        if re.search(pat, msg):
            return knob, msg
    src_lines = emitted.source.splitlines()
    for ln in errors:  # an error on a line of ours that carries a knob comment
        m = re.search(r"kernel\.cu\((\d+)\)", ln)
        if m and 0 < int(m.group(1)) <= len(src_lines):
            k = re.search(r"// knob: (\w+)", src_lines[int(m.group(1)) - 1])
            if k:
                return k.group(1), msg
    text = "\n".join(errors) or log
    for knob, pat in _KNOB_PATTERNS:
        if re.search(pat, text[:4000]):
            return knob, msg
    return "config", msg


@dataclasses.dataclass
class _Job:
    emitted: EmittedKernel
    key: str
    dir: Path

    @property
    def failed_dir(self) -> Path:  # where a failed build's files (and nvcc's log) are kept
        return self.dir.parent / f"{self.key}.failed"


DIGEST_FILE = "digest.json"


class CacheIntegrityError(Exception):
    """A cached kernel library does not match the digest recorded when it was built."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def verify_library(so_path: str | Path) -> None:
    """Raise ``CacheIntegrityError`` unless ``so_path`` matches the digest recorded next to it at build time."""
    so = Path(so_path)
    try:
        recorded = json.loads((so.parent / DIGEST_FILE).read_text())[so.name]
    except (OSError, ValueError, KeyError, TypeError):
        raise CacheIntegrityError(f"{so}: no build digest recorded next to it; not loading it") from None
    try:
        actual = _sha256(so)
    except OSError as exc:
        raise CacheIntegrityError(f"{so}: unreadable ({exc.strerror or exc})") from None
    if actual != recorded:
        raise CacheIntegrityError(f"{so}: differs from the library built there (digest mismatch); not loading it")


def _entry_valid(entry: Path, source: str) -> bool:
    """The cache entry holds the library nvcc built from ``source``, untouched since."""
    try:
        verify_library(entry / "kernel.so")
        recorded = json.loads((entry / DIGEST_FILE).read_text())
        return recorded.get("source_sha256") == hashlib.sha256(source.encode()).hexdigest()
    except (CacheIntegrityError, OSError, ValueError, AttributeError):
        return False


def _discard(entry: Path) -> None:
    """Move a bad entry out of the way first (atomic), then delete it."""
    if not entry.exists():
        return
    aside = entry.parent / f".{entry.name}.bad-{os.getpid()}-{time.monotonic_ns()}"
    try:
        os.replace(entry, aside)
    except OSError:
        aside = entry
    shutil.rmtree(aside, ignore_errors=True)


def _write_entry(entry: Path, job: _Job, log: str, so_digest: str | None) -> None:
    """A cache entry's files beside its kernel.cu and kernel.so: the ABI, the build log and (built) the digest."""
    (entry / "abi.json").write_text(json.dumps(dataclasses.asdict(job.emitted.abi), indent=1))
    (entry / "build.log").write_text(log)
    if so_digest is not None:
        (entry / DIGEST_FILE).write_text(json.dumps({
            "kernel.so": so_digest, "source_sha256": hashlib.sha256(job.emitted.source.encode()).hexdigest()}))


def _compile_locked(job: _Job, nvcc: str, flags: list[str]) -> tuple[bool, float, str]:
    tmp = Path(tempfile.mkdtemp(prefix=f".{job.key}.", dir=job.dir.parent))
    (tmp / "kernel.cu").write_text(job.emitted.source)
    ok, build_s, log = _run_nvcc(nvcc, flags, tmp, "kernel.cu", "kernel.so")
    if ok and not (tmp / "kernel.so").is_file():
        ok, log = False, log + "\nnvcc reported success but wrote no kernel.so"
    _write_entry(tmp, job, log, _sha256(tmp / "kernel.so") if ok else None)
    if ok:
        _discard(job.dir)  # whatever sat at the path failed verification (the lock keeps builders apart)
        os.replace(tmp, job.dir)
    else:
        shutil.rmtree(job.failed_dir, ignore_errors=True)
        os.replace(tmp, job.failed_dir)
    return ok, build_s, log


# ---------------------------------------------------------------------------------------------
# Units of several kernels

# CUTLASS 4.2 for sm_90a on the H200 host (benchmarks/results/2026-12-01-h200-build.md): eight kernels in one
# unit took 83.6 s of wall and CPU time against 336 CPU s as eight units: ~10 s a kernel once the unit's fixed
# front-end cost is shared.
KERNELS_PER_UNIT = 8
_UNIT_HEAD = "// Generated by mucutlass: several μCUTLASS kernels in one translation unit.\n"


def kernels_per_unit() -> int:
    try:
        return max(1, int(os.environ.get("MUCUTLASS_KERNELS_PER_UNIT", KERNELS_PER_UNIT)))
    except ValueError:
        return KERNELS_PER_UNIT


def split_source(source: str) -> tuple[str, str]:
    """(includes, body) of an emitted kernel: the body starts at its namespace."""
    at = source.find("\nnamespace mu_")
    return (source, "") if at < 0 else (source[:at + 1], source[at + 1:])


def unit_source(kernels: list[EmittedKernel]) -> str:
    """One translation unit for kernels of one include set: the includes once, then each kernel's
    namespace with its entry points renamed ``mucutlass_run_<namespace>`` (``KernelAbi.symbol``)."""
    head = split_source(kernels[0].source)[0]
    parts = [_UNIT_HEAD, head.split("\n", 1)[1] if head.startswith("//") else head]
    for e in kernels:
        body = split_source(e.source)[1]
        for fn in ("mucutlass_workspace_size", "mucutlass_run"):
            body = body.replace(f'extern "C" int {fn}(', f'extern "C" int {fn}_{e.namespace}(')
        parts.append(f"// kernel {e.kernel_name}\n{body}")
    return "\n".join(parts)


def _units(jobs: list[_Job], per_unit: int) -> list[list[_Job]]:
    """Kernels grouped by their includes (a conv unit must not include the GEMM adapter), in order,
    at most ``per_unit`` to a unit; a kernel asked for twice is built once."""
    seen, families = set(), {}
    for j in jobs:
        if j.key in seen:
            continue
        seen.add(j.key)
        families.setdefault(split_source(j.emitted.source)[0], []).append(j)
    out = []
    for family in families.values():
        n_units = -(-len(family) // per_unit)
        size = -(-len(family) // n_units)  # even units: 9 kernels make 5 + 4, not 8 + 1
        out.extend(family[i:i + size] for i in range(0, len(family), size))
    return out


def _lock_path(job: _Job) -> Path:
    return job.dir.parent / f".{job.key}.lock"


def _build_unit(unit: list[_Job], nvcc: str, flags: list[str], must: set[str]) -> dict[str, tuple[bool, float, str]]:
    """Build the kernels of one unit that no valid entry holds yet, under their file locks (taken in key
    order). Kernels in ``must`` are waited for; a kernel another builder holds (building it ahead) is
    left to it. A unit that nvcc rejects is built again one kernel per unit, so the others still build
    and the failing one gets its own log and error."""
    unit[0].dir.parent.mkdir(parents=True, exist_ok=True)
    held, results = [], {}
    try:
        for job in sorted(unit, key=lambda j: j.key):
            fh = open(_lock_path(job), "a")
            try:
                fcntl.flock(fh, fcntl.LOCK_EX if job.key in must else fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                fh.close()
                continue
            held.append((job, fh))
        todo = []
        for job, _ in held:
            if _entry_valid(job.dir, job.emitted.source):
                results[job.key] = (True, 0.0, "")
                continue
            for left in job.dir.parent.glob(f".{job.key}.*"):  # a killed build's folder: nobody else builds it now
                if left.is_dir():
                    shutil.rmtree(left, ignore_errors=True)
            todo.append(job)
        if len(todo) == 1:
            results[todo[0].key] = _compile_locked(todo[0], nvcc, flags)
        elif todo:
            results.update(_compile_unit_locked([j for j in unit if j in todo], nvcc, flags))
    finally:
        for _, fh in held:
            fh.close()
    return results


def _run_nvcc(nvcc: str, flags: list[str], cwd: Path, src: str, out: str) -> tuple[bool, float, str]:
    t0 = time.perf_counter()
    try:
        proc = subprocess.Popen([nvcc, *flags, src, "-o", out], cwd=cwd, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        with _PROCS_LOCK:
            _PROCS.add(proc)
        try:
            log, _ = proc.communicate(timeout=NVCC_TIMEOUT_S)
            ok = proc.returncode == 0
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            log, ok = f"nvcc timed out after {NVCC_TIMEOUT_S} s", False
        finally:
            with _PROCS_LOCK:
                _PROCS.discard(proc)
    except OSError as exc:
        log, ok = f"nvcc could not start: {exc}", False
    return ok, time.perf_counter() - t0, log or ""


def _compile_unit_locked(jobs: list[_Job], nvcc: str, flags: list[str]) -> dict[str, tuple[bool, float, str]]:
    kernels = [j.emitted for j in jobs]
    source = unit_source(kernels)
    # named after its first kernel's key (held locked here): the judge's containment check knows such names as
    # builds running beside an attempt (evals.judge.sandbox.KERNEL_ENTRY), not as files planted in the cache
    tmp = Path(tempfile.mkdtemp(prefix=f".{jobs[0].key}.unit-", dir=jobs[0].dir.parent))
    try:
        (tmp / "unit.cu").write_text(source)
        ok, unit_s, log = _run_nvcc(nvcc, flags, tmp, "unit.cu", "unit.so")
        if ok and not (tmp / "unit.so").is_file():
            ok, log = False, log + "\nnvcc reported success but wrote no unit.so"
        if not ok:  # one kernel of the unit may be at fault: build each alone, side by side
            with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1)) as pool:
                alone = list(pool.map(lambda j: _compile_locked(j, nvcc, flags), jobs))
            return {j.key: (r[0], r[1] + unit_s / len(jobs), r[2]) for j, r in zip(jobs, alone)}
        digest = _sha256(tmp / "unit.so")
        note = f"built in one unit with {len(jobs)} kernels ({', '.join(k.kernel_name for k in kernels)}) in {unit_s:.1f} s\n"
        out = {}
        for job in jobs:
            entry = Path(tempfile.mkdtemp(prefix=f".{job.key}.", dir=job.dir.parent))
            (entry / "kernel.cu").write_text(job.emitted.source)
            (entry / "unit.cu").write_text(source)
            # a copy, not a link: an entry changed in place must not change its unit's other entries
            shutil.copy2(tmp / "unit.so", entry / "kernel.so")
            _write_entry(entry, job, note + log, digest)
            _discard(job.dir)
            os.replace(entry, job.dir)
            out[job.key] = (True, unit_s / len(jobs), log)
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_PROCS: set = set()  # nvcc processes running now (builds ahead are stopped when the process exits)
_PROCS_LOCK = threading.Lock()
_AHEAD: dict[str, Future] = {}  # cache key -> the build ahead that holds it
_AHEAD_LOCK = threading.Lock()
_AHEAD_POOL: ThreadPoolExecutor | None = None


def _stop_builds() -> None:
    with _PROCS_LOCK:
        for proc in list(_PROCS):
            try:
                proc.kill()
            except OSError:
                pass


atexit.register(_stop_builds)


def _ahead_pool() -> ThreadPoolExecutor:
    global _AHEAD_POOL
    with _AHEAD_LOCK:
        if _AHEAD_POOL is None:
            _AHEAD_POOL = ThreadPoolExecutor(max_workers=build_jobs_count(), thread_name_prefix="mucutlass-build-ahead")
        return _AHEAD_POOL


def build_jobs_count() -> int:
    """nvcc processes at once: ``MUCUTLASS_BUILD_JOBS`` (an evaluation with several GPU workers on one
    host gives each its share of the cores), else the cores."""
    try:
        return max(1, int(os.environ.get("MUCUTLASS_BUILD_JOBS") or 0) or os.cpu_count() or 1)
    except ValueError:
        return os.cpu_count() or 1


def _emitted_jobs(program: Program, flags: list[str], nvcc_ver: str, cut_ver: str) -> list[_Job]:
    emitted, diags = emit_program(program)
    if has_errors(diags):
        return []
    root = cache_dir()
    return [_Job(e, k, root / k) for e in emitted for k in [cache_key(e.source, flags, nvcc_ver, cut_ver)]]


def _ahead_jobs(ahead, flags, nvcc_ver, cut_ver, skip: set[str]) -> list[_Job]:
    """Kernels of the programs expected next that no valid entry or build ahead holds yet."""
    from dsl_compiler.checks import check

    out = []
    for program in ahead or ():
        try:
            if has_errors(check(program, "sm90a")):  # a program the checks refuse would fail its whole unit
                continue
            jobs = _emitted_jobs(program, flags, nvcc_ver, cut_ver)
        except Exception:  # noqa: BLE001 -- a hint that cannot be emitted is skipped
            continue
        for j in jobs:
            if j.key in skip:
                continue
            skip.add(j.key)
            with _AHEAD_LOCK:
                busy = j.key in _AHEAD and not _AHEAD[j.key].done()
            if not busy and not _entry_valid(j.dir, j.emitted.source):
                out.append(j)
    return out


def wait_ahead(timeout_s: float | None = None) -> None:
    """Wait until every build ahead started so far has finished (benchmarks, tests)."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    with _AHEAD_LOCK:
        futures = {id(f): f for f in _AHEAD.values()}
    for fut in futures.values():
        try:
            fut.result(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
        except Exception:  # noqa: BLE001 -- a failed unit is rebuilt by whoever needs it
            pass


def build_ahead(programs, target: str = "sm90a") -> int:
    """Start building the kernels of ``programs`` (the ones the next attempts are expected to use) in
    the background, several to a unit; returns how many kernels were started. A later ``build_program``
    of one of them waits for its unit (the file lock) instead of building it again."""
    try:
        nvcc = find_nvcc()
        flags = nvcc_flags(target)
        nvcc_ver, cut_ver = nvcc_version(nvcc), cutlass_version()
    except ToolchainError:
        return 0
    jobs = _ahead_jobs(programs, flags, nvcc_ver, cut_ver, set())
    _submit_ahead(jobs, nvcc, flags)
    return len(jobs)


def _submit_ahead(jobs: list[_Job], nvcc: str, flags: list[str]) -> None:
    pool = _ahead_pool()
    for unit in _units(jobs, kernels_per_unit()):
        fut = pool.submit(_build_unit, unit, nvcc, flags, set())
        with _AHEAD_LOCK:
            for j in unit:
                _AHEAD[j.key] = fut


def build_program(program: Program, target: str = "sm90a", jobs: int | None = None, ahead=()) -> BuildResult:
    """Emit, compile (in parallel) and cache every kernel of ``program``; never raises on bad input.

    ``ahead``: programs the next attempts are expected to build. When this program needs nvcc, their
    kernels join its units (up to ``MUCUTLASS_KERNELS_PER_UNIT`` kernels a unit), so one round of
    front-end time serves them all; when it is cached, they are built in the background while the
    caller validates and times this one."""
    t0 = time.perf_counter()
    if target not in TARGETS:
        return BuildResult(ok=False, diagnostics=[Diagnostic(code="unsupported", message=f"unknown target '{target}'",
                                                             expected=", ".join(TARGETS), hint="use target='sm90a'")])
    diags: list[Diagnostic] = []
    try:  # the static checks catch shape, alignment and config errors before any nvcc time is spent
        from dsl_compiler.checks import check

        diags = list(check(program, target))
    except Exception:  # noqa: BLE001 -- the emitter below still reports what it cannot build
        diags = []
    if has_errors(diags):
        return BuildResult(ok=False, diagnostics=diags, seconds=time.perf_counter() - t0)
    emitted, emit_diags = emit_program(program)
    diags += emit_diags
    if has_errors(diags):
        return BuildResult(ok=False, diagnostics=diags, seconds=time.perf_counter() - t0)
    if not emitted:
        return BuildResult(ok=True, diagnostics=diags, seconds=time.perf_counter() - t0, cached=True)
    try:
        nvcc = find_nvcc()
        flags = nvcc_flags(target)
        nvcc_ver, cut_ver = nvcc_version(nvcc), cutlass_version()
    except ToolchainError as exc:
        return BuildResult(ok=False, diagnostics=[*diags, Diagnostic(code="build", message=str(exc),
                                                                        hint="install the CUDA toolkit (nvcc 12.4 or newer)")])
    root = cache_dir()
    build_jobs = []
    for e in emitted:
        key = cache_key(e.source, flags, nvcc_ver, cut_ver)
        build_jobs.append(_Job(e, key, root / key))
    todo = [j for j in build_jobs if not _entry_valid(j.dir, j.emitted.source)]
    with _AHEAD_LOCK:  # kernels a build ahead is compiling now: wait for it rather than race it
        running = {id(f): f for j in todo for f in [_AHEAD.get(j.key)] if f is not None and not f.done()}
    if running:
        for fut in running.values():
            try:
                fut.result()
            except Exception:  # noqa: BLE001 -- a failed build ahead: this build tries again below
                pass
        todo = [j for j in todo if not _entry_valid(j.dir, j.emitted.source)]
    results: dict[str, tuple[bool, float, str]] = {}
    extra = _ahead_jobs(ahead, flags, nvcc_ver, cut_ver, {j.key for j in build_jobs})
    if todo:
        must = {j.key for j in todo}
        units = _units([*todo, *extra], kernels_per_unit())
        mine = [u for u in units if any(j.key in must for j in u)]
        _submit_ahead([j for u in units if u not in mine for j in u], nvcc, flags)
        workers = max(1, min(len(mine), jobs or build_jobs_count()))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for unit_results in pool.map(lambda u: _build_unit(u, nvcc, flags, must), mine):
                results.update(unit_results)
    else:
        _submit_ahead(extra, nvcc, flags)
    hits = sum(1 for j in build_jobs if j not in todo)
    out = BuildResult(ok=True, diagnostics=list(diags), cached=not todo, kernels=len(build_jobs), cache_hits=hits,
                      ahead_kernels=len(extra))
    for job in build_jobs:
        _record_kernel(program, job, results.get(job.key, (True, 0.0, "")), out)
    if out.ok:
        _add_fused_cast_library(program, out)
    out.seconds = round(time.perf_counter() - t0, 3)
    return out


def _record_kernel(program: Program, job: _Job, result: tuple[bool, float, str], out: BuildResult) -> None:
    """One kernel's build in the result: its library and source, or nvcc's first error as a Diagnostic."""
    name = job.emitted.kernel_name
    ok, build_s, log = result
    out.kernel_build_s[name] = round(build_s, 3)
    if ok:
        out.artifacts[name] = str(job.dir / "kernel.so")
        out.sources[name] = str(job.dir / "kernel.cu")
        return
    out.ok = False
    knob, msg = map_nvcc_error(log, job.emitted)
    kernel = next(k for k in program.kernels + program.row_kernels if k.name == name)
    out.diagnostics.append(Diagnostic(
        code="build", span=kernel.span,
        message=f"kernel '{name}': nvcc rejected the CUTLASS kernel ({knob}): {msg[:300]}",
        found=f"{knob}", hint=f"change {knob} of kernel '{name}' (full log: {job.failed_dir / 'build.log'})"))


def _add_fused_cast_library(program: Program, out: BuildResult) -> None:
    """With ``MUCUTLASS_FUSED_CASTS=on``, the library that runs the program's input casts as one launch
    (``dsl_compiler.fused_cast``; one per toolchain, a few seconds of nvcc) joins the artifacts. Where it
    cannot be built the casts stay torch steps, which is said as a warning."""
    if runtime_setting("MUCUTLASS_FUSED_CASTS") != "on" or not fused_cast.plan_input_casts(program):
        return
    try:
        out.artifacts[fused_cast.ARTIFACT] = str(build_fused_cast_library())
    except (ToolchainError, fused_cast.FusedCastBuildError, OSError) as exc:
        out.diagnostics.append(Diagnostic(code="build", severity="warning", message=str(exc),
                                          hint="the input casts run as separate torch steps"))


def build_fused_cast_library(cache_root: Path | None = None) -> Path:
    """The fused-cast library (``dsl_compiler.fused_cast.CUDA_SOURCE``), built once per nvcc into the kernel
    cache: an entry named by its key, with the digest the runtime checks before loading it."""
    nvcc = find_nvcc()
    entry = Path(cache_root or cache_dir()) / fused_cast.library_key(nvcc_version(nvcc))
    so = entry / "kernel.so"
    if so.is_file() and (entry / DIGEST_FILE).is_file():
        return so
    entry.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{entry.name}.", dir=entry.parent))
    try:
        (tmp / "kernel.cu").write_text(fused_cast.CUDA_SOURCE)
        ok, _, log = _run_nvcc(nvcc, list(fused_cast.FLAGS), tmp, "kernel.cu", "kernel.so")
        if not ok or not (tmp / "kernel.so").is_file():
            first = next((ln for ln in log.splitlines() if "error" in ln), (log.strip().splitlines() or ["?"])[-1])
            raise fused_cast.FusedCastBuildError(f"fused-cast library: nvcc failed: {first.strip()[:300]}")
        (tmp / DIGEST_FILE).write_text(json.dumps({"kernel.so": _sha256(tmp / "kernel.so")}))
        try:
            os.replace(tmp, entry)  # atomic: of two builds of the same key, one whole entry stays
        except OSError:
            if not so.is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return so
