"""Candidates of the ``cuda`` variants: a KernelBench ``ModelNew`` module that compiles its own kernels
with ``torch.utils.cpp_extension.load_inline``.

    source, error = extract_python(reply)            # the ```python block of a model's reply (nodes.tiers)
    errors = check_source(source)                    # syntax, a class ModelNew: model-readable lines
    prepared = prepare(source)                       # load_inline names and build folders by content hash
    outcome = build(prepared)                        # builds in a child process; compile errors as text
    Candidate.from_source(prepared.source)           # judged by the harness like any ModelNew

The extension is built here, in a child process of its own (time limit, no secrets in its
environment, its own working folder), never in the judge: ``prepare`` gives every ``load_inline``
call a name and a build folder derived from the module's content, and ``build`` runs the module's
top level once there. When the harness then imports the same source, ``load_inline`` finds the
library built and only loads it. A cached build (the same content) costs nothing.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BUILD_TIMEOUT_S = 900.0  # one nvcc build of a load_inline extension takes 40-60 s on an H200 host
_SECRET_ENV = re.compile(r"KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL", re.I)
NO_GPU_EXIT = 3  # the build child's exit status when the module brings CUDA code and no GPU is visible


def check_source(source: str, filename: str = "model_new.py") -> list[str]:
    """Static errors of a ModelNew module, one model-readable line each (empty when it may be built)."""
    try:
        tree = ast.parse(source, filename=filename)
    except SyntaxError as exc:
        return [f"{filename}:{exc.lineno or 0}:{exc.offset or 0}: error[syntax]: {exc.msg}"]
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in tree.body):
        return [f"{filename}:1:1: error[no-model-new]: the module defines no top-level class ModelNew"]
    return []


def uses_cuda(source: str) -> bool:
    """Whether the module brings CUDA code (a ``cuda_sources`` argument or a ``__global__`` kernel)."""
    return "cuda_sources" in source or "__global__" in source


def ext_cache_dir() -> Path:
    """Where load_inline builds live: ``$MUCUTLASS_CUDA_EXT_DIR``, else the user cache folder (never the
    project, and apart from the μCUTLASS kernel cache)."""
    root = os.environ.get("MUCUTLASS_CUDA_EXT_DIR")
    if root:
        return Path(root)
    import platformdirs

    return Path(platformdirs.user_cache_dir("mucutlass")) / "cuda_ext"


def _toolchain_tag() -> str:
    try:
        torch_version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        torch_version = "none"
    return f"{sys.executable}|torch {torch_version}"


@dataclass
class PreparedSource:
    source: str  # what the harness judges: the module with every load_inline bound to its build folder
    digest: str  # content hash of the module as written (and of the toolchain)
    build_dir: Path  # <ext cache>/<digest>/: one sub-folder per load_inline call
    extensions: int = 0  # load_inline calls found


def _is_load_inline(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Name) and f.id == "load_inline") or (isinstance(f, ast.Attribute) and f.attr == "load_inline")


def prepare(source: str, cache_root: Path | None = None) -> PreparedSource:
    """Give each ``load_inline`` call a name suffixed with the module's digest and a build folder under
    the cache: the same module always maps to the same built library, two modules never share one, and
    PyTorch's per-process versioning of a reused name (a rebuild under ``name_v1``) never happens."""
    digest = hashlib.sha256(f"{_toolchain_tag()}\0{source}".encode()).hexdigest()[:20]
    build_dir = (cache_root or ext_cache_dir()) / digest
    tree = ast.parse(source)
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and _is_load_inline(n)]
    for i, call in enumerate(calls):
        kwargs = {k.arg: k for k in call.keywords if k.arg}
        name_expr = kwargs["name"].value if "name" in kwargs else (call.args[0] if call.args else ast.Constant("ext"))
        suffixed = ast.BinOp(left=ast.Call(func=ast.Name("str", ast.Load()), args=[name_expr], keywords=[]),
                             op=ast.Add(), right=ast.Constant(f"_{digest[:12]}_{i}"))
        if "name" in kwargs:
            kwargs["name"].value = suffixed
        elif call.args:
            call.args[0] = suffixed
        folder = ast.Constant(str(build_dir / str(i)))
        if "build_directory" in kwargs:
            kwargs["build_directory"].value = folder
        else:
            call.keywords.append(ast.keyword(arg="build_directory", value=folder))
    text = ast.unparse(ast.fix_missing_locations(tree)) + "\n" if calls else source
    return PreparedSource(source=text, digest=digest, build_dir=build_dir, extensions=len(calls))


@dataclass
class BuildOutcome:
    ok: bool
    seconds: float = 0.0
    cached: bool = False
    reason: str = ""  # one line when not ok
    diagnostics: list[str] = field(default_factory=list)  # compiler errors for the writer


# Runs in the build child: the module's top level (its load_inline calls) once, nothing else.
_BUILD_CHILD = f"""
import sys
source = open(sys.argv[1]).read()
uses_cuda = sys.argv[2] == "1"
import torch
if uses_cuda and not torch.cuda.is_available():
    print("no CUDA GPU is visible to PyTorch here (torch " + torch.__version__ + ")", file=sys.stderr)
    sys.exit({NO_GPU_EXIT})
namespace = {{"__name__": "mucutlass_model_new_build"}}
exec(compile(source, "model_new.py", "exec"), namespace)
if not isinstance(namespace.get("ModelNew"), type):
    print("model_new.py: the module defines no class ModelNew", file=sys.stderr)
    sys.exit(2)
"""


def _child_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not _SECRET_ENV.search(k)}
    env.setdefault("MAX_JOBS", str(max(1, (os.cpu_count() or 2) // 2)))
    return env


def compile_errors(log: str, build_dir: Path | None = None, limit: int = 20) -> list[str]:
    """What the writer needs of a failed build: the compiler's error lines (nvcc, g++), with the build
    folder's path shortened to the file name; else the end of the Python traceback (the last line first)."""
    lines = [ln.rstrip() for ln in log.splitlines() if ln.strip()]
    if build_dir is not None:
        lines = [re.sub(re.escape(str(build_dir)) + r"/\d+/", "", ln) for ln in lines]
    compiler = [ln for ln in lines if re.search(r"\berror\b\s*(\[[^\]]*\])?\s*:|: error|fatal error", ln)
                and not ln.lstrip().startswith(("raise ", "RuntimeError: Error building"))]
    if compiler:
        return [ln[:400] for ln in compiler[:limit]]
    tail = lines[-limit:]
    return [ln[:400] for ln in (tail[-1:] + tail[:-1])]


def build(prepared: PreparedSource, timeout_s: float = BUILD_TIMEOUT_S) -> BuildOutcome:
    """Build the module's extensions in a child process (cached by content); never raises on bad input."""
    if prepared.extensions == 0 and not uses_cuda(prepared.source):
        return BuildOutcome(ok=True, cached=True)  # nothing to build: the harness imports it as written
    marker = prepared.build_dir / "built.ok"
    if marker.is_file():
        return BuildOutcome(ok=True, cached=True)
    prepared.build_dir.mkdir(parents=True, exist_ok=True)
    for i in range(prepared.extensions):
        (prepared.build_dir / str(i)).mkdir(exist_ok=True)
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="mucutlass-build-") as work:
        src = Path(work) / "model_new.py"
        src.write_text(prepared.source)
        proc = subprocess.Popen(
            [sys.executable, "-c", _BUILD_CHILD, str(src), "1" if uses_cuda(prepared.source) else "0"],
            cwd=work, env=_child_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
            start_new_session=True,  # its own process group: a timeout ends nvcc and ninja too
        )
        try:
            log, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            return BuildOutcome(ok=False, seconds=time.perf_counter() - start,
                                reason=f"the build ran past {timeout_s:.0f} s and was stopped")
    seconds = time.perf_counter() - start
    (prepared.build_dir / "build.log").write_text(log)
    if proc.returncode == 0:
        marker.write_text(f"{seconds:.1f}\n")
        return BuildOutcome(ok=True, seconds=seconds)
    if proc.returncode == NO_GPU_EXIT:
        return BuildOutcome(ok=False, seconds=seconds, reason=(
            f"the cuda variant needs a CUDA GPU: this ModelNew brings CUDA kernels and {log.strip().splitlines()[-1]}; "
            "run it on a GPU host (the dsl variants run anywhere)"))
    errors = compile_errors(log, prepared.build_dir)
    first = errors[0] if errors else f"the module's top level exited with status {proc.returncode}"
    return BuildOutcome(ok=False, seconds=seconds, reason=first[:300], diagnostics=errors)
