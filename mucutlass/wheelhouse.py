"""`mucutlass wheelhouse`: download the wheels an air-gapped GPU host needs to run mucutlass.

Resolves the project's requirements (and theirs) from the installed distributions, leaves out
torch and its CUDA stack (the GPU host brings its own), and runs
``pip download --only-binary=:all: --no-deps`` for each name at the installed version with the
target's Python and platform tags, so that on the host
``pip install --no-index --no-deps --target /tmp/site DIR/*.whl`` works.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
from pathlib import Path

# Provided by the GPU host's image (or far too large to carry): never downloaded.
EXCLUDED = re.compile(r"^(torch|triton|nvidia-(?!cutlass$).*|cuda-.*|numpy|setuptools|pip|wheel)$")
# The runtime requirements of a GPU worker alone (--worker-only): the language, the backend and the harness.
WORKER_ROOTS = ("pydantic", "lark", "nvidia-cutlass", "platformdirs", "rich")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")
_NAME = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)")  # a distribution name at the start of a line


def product_roots() -> tuple[str, ...]:
    """mucutlass's own runtime requirements (the whole product: graph and model tiers included)."""
    from importlib import metadata

    try:
        reqs = metadata.distribution("mucutlass").requires or []
    except metadata.PackageNotFoundError:  # running from a checkout that is not installed
        import tomllib

        pyproject = Path(__file__).resolve().parent.parent / "pyproject.toml"
        reqs = tomllib.loads(pyproject.read_text())["project"]["dependencies"] if pyproject.is_file() else []
    names = (_requirement_name(r) for r in reqs)
    return tuple(n for n in names if n)


def read_have(path: Path) -> set[str]:
    """Package names a host already has, from its `pip freeze` or `pip list` output (one per line)."""
    have = set()
    for line in path.read_text().splitlines():
        m = _NAME.match(line)
        if m and not line.lstrip().startswith(("#", "Package", "---")):
            have.add(canonical(m.group(1)))
    return have


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_name(req: str) -> str | None:
    """The name of a Requires-Dist entry, or None when it applies only to an extra."""
    if ";" in req and "extra" in req.split(";", 1)[1]:
        return None
    m = _NAME.match(req)
    return canonical(m.group(1)) if m else None


def resolve(roots: tuple[str, ...] = WORKER_ROOTS, have: set[str] = frozenset()) -> dict[str, str]:
    """name -> installed version for ``roots`` and everything they require (installed closure),
    less what the host already ``have``s (its own copy serves, and so do its dependencies)."""
    from importlib import metadata

    found: dict[str, str] = {}
    todo = [canonical(r) for r in roots]
    while todo:
        name = todo.pop()
        if name in found or EXCLUDED.match(name) or name in have:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        found[name] = dist.version
        for req in dist.requires or []:
            dep = _requirement_name(req)
            if dep and dep not in found:
                todo.append(dep)
    return dict(sorted(found.items()))


def download_commands(packages: dict[str, str], out: Path, python: str, platform: str) -> list[list[str]]:
    platforms = [platform] + [p for p in PLATFORMS if p != platform]
    cmds = []
    for name, version in packages.items():
        cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--no-deps", "-d", str(out),
               "--python-version", python, "--implementation", "cp"]
        for p in platforms:
            cmd += ["--platform", p]
        cmds.append(cmd + [f"{name}=={version}"])
    return cmds


def handle(args: argparse.Namespace) -> int:
    out = Path(args.out)
    if not re.fullmatch(r"3\.\d+", args.python):
        print(f"error: --python takes a version like 3.12, got '{args.python}'", file=sys.stderr)
        return 2
    if args.have and not Path(args.have).is_file():
        print(f"error: --have {args.have}: no such file", file=sys.stderr)
        return 2
    if out.exists() and not out.is_dir():
        print(f"error: --out {out}: exists and is not a folder", file=sys.stderr)
        return 2
    try:
        have = read_have(Path(args.have)) if args.have else set()
    except (OSError, UnicodeDecodeError) as exc:
        print(f"error: --have {args.have}: not a readable text file ({type(exc).__name__})", file=sys.stderr)
        return 2
    roots = tuple(args.package) if args.package else (WORKER_ROOTS if args.worker_only else product_roots())
    packages = resolve(roots, have)
    if not packages:
        print("error: none of the requirements is installed here; install mucutlass's dependencies first", file=sys.stderr)
        return 1
    out.mkdir(parents=True, exist_ok=True)
    failed = []
    for cmd in download_commands(packages, out, args.python, args.platform):
        if args.dry_run:
            print(" ".join(cmd))
            continue
        proc = subprocess.run(cmd, capture_output=True, text=True)
        name = cmd[-1]
        print(f"{'ok  ' if proc.returncode == 0 else 'FAIL'} {name}")
        if proc.returncode:
            failed.append((name, (proc.stderr.strip().splitlines() or ["pip failed"])[-1]))
    if failed:
        for name, why in failed:
            print(f"error: {name}: {why}", file=sys.stderr)
        print("hint: a package with no wheel for this platform needs another --platform tag or an sdist build", file=sys.stderr)
        return 1
    if not args.dry_run:
        print(f"{len(packages)} wheels in {out}; on the GPU host: "
              f"pip install --no-index --no-deps --target /tmp/site {out}/*.whl && export PYTHONPATH=/tmp/site")
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("wheelhouse", help="download the wheels an air-gapped GPU host needs (torch excluded)")
    p.add_argument("--out", default="wheelhouse", help="folder for the wheels (default: ./wheelhouse)")
    p.add_argument("--python", default="3.12", help="the GPU host's Python version (default: 3.12)")
    p.add_argument("--platform", default="manylinux_2_28_x86_64", help="the host's platform tag (more are tried after it)")
    p.add_argument("--package", action="append", help="a root requirement (repeatable; default: mucutlass's own)")
    p.add_argument("--worker-only", action="store_true",
                   help="only what a GPU worker needs (language, backend, harness), not the graph and model tiers")
    p.add_argument("--have", default=None,
                   help="the host's `pip freeze` or `pip list` output: packages it has are not downloaded")
    p.add_argument("--dry-run", action="store_true", help="print the pip commands instead of running them")
    p.set_defaults(func=handle)
