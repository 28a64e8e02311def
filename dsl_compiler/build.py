"""Build a program's kernels: emit C++, run nvcc for sm_90a, cache by content hash.

One translation unit per kernel; nvcc runs in a thread pool sized to the cores (each nvcc is
its own process and uses one core). A build is keyed by the source, the flags, nvcc's version and
the CUTLASS version, and lives under ``$MUCUTLASS_CACHE_DIR`` (else the user cache directory):
``<cache>/kernels/<key>/{kernel.cu, kernel.so, build.log, abi.json, digest.json}``. nvcc's errors come
back as one short Diagnostic naming the kernel and the knob; the raw log stays in the cache directory.

The cache is trusted only as far as it checks out: ``digest.json`` records the SHA-256 of the library
and its source when nvcc produced them, and an entry whose files do not match (a library planted or
swapped at the content-hash path, a half-written entry) is moved aside and rebuilt; the runtime
verifies the same digest before it loads a library. A build happens in a temporary folder and is
moved into place whole, so a crashed build leaves no entry behind; builders of the same kernel take
a file lock on it, so two processes build it once.
"""

from __future__ import annotations

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
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pydantic import BaseModel, Field

from dsl_compiler.diagnostics import Diagnostic, has_errors
from dsl_compiler.emit_cutlass import EmittedKernel, emit_program
from dsl_compiler.ir import Program

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
    kernel_build_s: dict[str, float] = Field(default_factory=dict)  # 0.0 for a cache hit


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
    root = cutlass_root()
    return [TARGETS[target], *BASE_FLAGS, f"-I{root / 'include'}", f"-I{root / 'tools' / 'util' / 'include'}"]


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


def _compile(job: _Job, nvcc: str, flags: list[str]) -> tuple[bool, float, str]:
    """Build one kernel under its file lock: a valid entry (another process may just have built it) is
    used as is; otherwise build in a temporary folder and move it into place whole."""
    job.dir.parent.mkdir(parents=True, exist_ok=True)
    with open(job.dir.parent / f".{job.key}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes, or when a killed holder dies
        if _entry_valid(job.dir, job.emitted.source):
            return True, 0.0, ""
        for left in job.dir.parent.glob(f".{job.key}.*"):  # a killed build's folder: nobody else builds it now
            if left.is_dir():
                shutil.rmtree(left, ignore_errors=True)
        return _compile_locked(job, nvcc, flags)


def _compile_locked(job: _Job, nvcc: str, flags: list[str]) -> tuple[bool, float, str]:
    tmp = Path(tempfile.mkdtemp(prefix=f".{job.key}.", dir=job.dir.parent))
    (tmp / "kernel.cu").write_text(job.emitted.source)
    (tmp / "abi.json").write_text(json.dumps(dataclasses.asdict(job.emitted.abi), indent=1))
    t0 = time.perf_counter()
    try:
        proc = subprocess.run([nvcc, *flags, "kernel.cu", "-o", "kernel.so"], cwd=tmp, capture_output=True,
                              text=True, timeout=NVCC_TIMEOUT_S)
        log, ok = proc.stdout + proc.stderr, proc.returncode == 0
    except subprocess.TimeoutExpired:
        log, ok = f"nvcc timed out after {NVCC_TIMEOUT_S} s", False
    build_s = time.perf_counter() - t0
    (tmp / "build.log").write_text(log)
    if ok and not (tmp / "kernel.so").is_file():
        ok, log = False, log + "\nnvcc reported success but wrote no kernel.so"
    if ok:
        (tmp / DIGEST_FILE).write_text(json.dumps({
            "kernel.so": _sha256(tmp / "kernel.so"),
            "source_sha256": hashlib.sha256(job.emitted.source.encode()).hexdigest()}))
        _discard(job.dir)  # whatever sat at the path failed verification (the lock keeps builders apart)
        os.replace(tmp, job.dir)
    else:
        shutil.rmtree(job.failed_dir, ignore_errors=True)
        os.replace(tmp, job.failed_dir)
    return ok, build_s, log


def build_program(program: Program, target: str = "sm90a", jobs: int | None = None) -> BuildResult:
    """Emit, compile (in parallel) and cache every kernel of ``program``; never raises on bad input."""
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
    results: dict[str, tuple[bool, float, str]] = {}
    if todo:
        workers = max(1, min(len(todo), jobs or os.cpu_count() or 1))
        with ThreadPoolExecutor(max_workers=workers) as pool:
            for job, res in zip(todo, pool.map(lambda j: _compile(j, nvcc, flags), todo)):
                results[job.emitted.kernel_name] = res
    out = BuildResult(ok=True, diagnostics=list(diags), cached=not todo)
    for job in build_jobs:
        name = job.emitted.kernel_name
        ok, build_s, log = results.get(name, (True, 0.0, ""))
        out.kernel_build_s[name] = round(build_s, 3)
        if ok:
            out.artifacts[name] = str(job.dir / "kernel.so")
            out.sources[name] = str(job.dir / "kernel.cu")
        else:
            out.ok = False
            knob, msg = map_nvcc_error(log, job.emitted)
            kernel = next(k for k in program.kernels if k.name == name)
            out.diagnostics.append(Diagnostic(
                code="build", span=kernel.span,
                message=f"kernel '{name}': nvcc rejected the CUTLASS kernel ({knob}): {msg[:300]}",
                found=f"{knob}", hint=f"change {knob} of kernel '{name}' (full log: {job.failed_dir / 'build.log'})"))
    out.seconds = round(time.perf_counter() - t0, 3)
    return out
