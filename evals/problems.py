"""KernelBench-format problems: one Python file with ``Model``, ``get_inputs`` and ``get_init_inputs``.

A problem may set ``TOLERANCE`` (atol = rtol for ``torch.allclose``) and ``ALLOWED_PRECISIONS``
(the math precisions a candidate may use) as module constants; otherwise the suite's default
tolerance applies (1e-2, KernelBench v0.1) and the precisions follow from the tolerance.

Loading never raises anything but ``ProblemError``, whose message is one line naming the file.
Torch is imported only when a problem is loaded, so importing this module stays cheap.

The commands check a problem in a child process before they load it in their own (``check_problem``,
``load_problems(check=True)``): its import, ``get_init_inputs()``, ``Model()``, ``get_inputs()`` and a
forward on meta tensors, each under the problem-call limit, and the child killed when a call ignores
it. A problem whose file loads but whose setup fails there is still returned, with ``setup_error``
set, and every later call into its setup code raises that error instead of running it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import re
import sys
import tomllib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Iterable

from dsl_compiler.limits import ChildCalls, ChildDied, TimeLimitExceeded, time_limit
from run_vocabulary.defaults import DEFAULT_TOLERANCE
from run_vocabulary.problem import ALL_PRECISIONS, DEFAULT_PRECISIONS, STRICT_PRECISIONS, default_precisions  # noqa: F401 - re-exported

REQUIRED_NAMES = ("Model", "get_inputs", "get_init_inputs")

SUITES_DIR = Path(__file__).resolve().parent / "suites"
SUITES_INDEX = SUITES_DIR / "index.toml"

_KB_NAME = re.compile(r"^(\d+)_(.+)$")
_LEVEL_DIR = re.compile(r"^level(\d+)$", re.IGNORECASE)


class ProblemError(Exception):
    """A problem file (or a selection of them) cannot be used; the message is one line."""


class ProblemSetupError(ProblemError):
    """The file loads, but setting the problem up fails: ``get_init_inputs()``, ``Model()``, ``get_inputs()``
    (None, float64 or complex tensors) or its forward on its own inputs."""


IMPORT_CALL = "importing the problem"  # the time limit's name for a problem's import


@dataclass(eq=False)
class Problem:
    """One problem: its source, where it came from, how it is judged, and its imported module."""

    name: str
    path: str
    source: str
    module: ModuleType = field(repr=False)
    tolerance: float = DEFAULT_TOLERANCE
    allowed_precisions: tuple[str, ...] = DEFAULT_PRECISIONS
    level: int | None = None
    problem_id: int | None = None
    suite: str | None = None
    # the Model's __init__ cannot run with the device as default (a CPU torch.Generator handed to a factory
    # function): it and every candidate are built on the CPU and moved (found by make_model_of)
    init_on_cpu: bool = False
    # why its setup failed when it was checked in a child process ("" when it did not, or was not checked): its
    # setup code is then never run in this process (make_model, make_inputs and the SOL count raise this instead)
    setup_error: str = ""

    @property
    def key(self) -> str:
        """A stable identifier: ``builtin/gemm_square``, ``L2/12``, or the file name."""
        if self.suite:
            return f"{self.suite}/{self.name}"
        if self.level is not None and self.problem_id is not None:
            return f"L{self.level}/{self.problem_id}"
        return self.name

    @property
    def source_hash(self) -> str:
        return hashlib.sha256(self.source.encode()).hexdigest()[:16]

    def make_model(self, seed: int = 0, device: Any = None):
        """Build the reference ``Model`` the way KernelBench does: seed, then construct, so a
        ``ModelNew`` built with the same seed gets the same parameters."""
        return self.make_model_of(self.module.Model, seed, device)

    def make_model_of(self, cls, seed: int = 0, device: Any = None):
        """Construct ``cls`` (``Model`` or a ``ModelNew``) with the problem's init inputs under ``seed``.
        With a device, parameters are created on it directly (fast, and the same for every class
        built this way); the values then depend on the device's generator, not the CPU's. A Model that
        cannot be built that way is built on the CPU and moved, and ``init_on_cpu`` says so from then on
        (the judge tells candidate processes to build the same way)."""
        if device is not None and not self.init_on_cpu:
            try:
                return self._construct(cls, seed, device)
            except RuntimeError:  # e.g. "Expected a 'cuda' device type for generator": try the CPU before failing
                model = self._construct(cls, seed, None)
                self.init_on_cpu = True
        else:
            model = self._construct(cls, seed, None)
        if device is not None and hasattr(model, "to"):
            model = model.to(device)
        return model

    def _construct(self, cls, seed: int, device: Any):
        import torch

        with _default_device(device), self._limit("get_init_inputs() and Model()"):
            init_inputs = list(self.module.get_init_inputs())
            torch.manual_seed(seed)
            model = cls(*init_inputs)
        return model.to(device) if device is not None and hasattr(model, "to") else model

    def make_inputs(self, seed: int = 0, device: Any = None) -> list:
        """The forward arguments for one input set: ``get_inputs()`` under ``seed``, created on
        ``device`` (or moved there when the problem pins another device)."""
        import torch

        with _default_device(device), self._limit("get_inputs()"):
            torch.manual_seed(seed)
            inputs = list(self.module.get_inputs())
        if device is not None:
            inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
        return inputs

    @contextmanager
    def _limit(self, what: str) -> Iterator[None]:
        """Problem code under the problem-call time limit; past it, a one-line ProblemError."""
        if self.setup_error:
            raise ProblemSetupError(self.setup_error)
        try:
            with time_limit(f"{self.path}: {what}"):
                yield
        except TimeLimitExceeded as exc:
            raise ProblemError(str(exc)) from None

    def to_spec(self) -> dict:
        """A picklable, JSON-able description from which ``Problem.from_spec`` rebuilds it
        (in a worker process)."""
        return {
            "name": self.name,
            "path": self.path,
            "source": self.source,
            "tolerance": self.tolerance,
            "allowed_precisions": list(self.allowed_precisions),
            "level": self.level,
            "problem_id": self.problem_id,
            "suite": self.suite,
        }

    @classmethod
    def from_spec(cls, spec: dict) -> "Problem":
        module = _import_source(spec["source"], spec["path"])
        return cls(
            name=spec["name"],
            path=spec["path"],
            source=spec["source"],
            module=module,
            tolerance=float(spec["tolerance"]),
            allowed_precisions=tuple(spec["allowed_precisions"]),
            level=spec.get("level"),
            problem_id=spec.get("problem_id"),
            suite=spec.get("suite"),
        )


def _default_device(device):
    import contextlib

    import torch

    if device is None:
        return contextlib.nullcontext()
    return torch.device(device)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _import_source(source: str, path: str) -> ModuleType:
    """Execute a problem's source as a fresh module (unique name, so two files with the same
    stem never collide); registered in ``sys.modules`` so dataclasses and pickling work."""
    digest = hashlib.sha256((path + "\0" + source).encode()).hexdigest()[:12]
    mod_name = f"mucutlass_problem_{re.sub(r'[^0-9A-Za-z_]', '_', Path(path).stem)}_{digest}"
    if mod_name in sys.modules:
        return sys.modules[mod_name]
    spec = importlib.util.spec_from_loader(mod_name, loader=None, origin=path)
    module = importlib.util.module_from_spec(spec)
    module.__file__ = path
    sys.modules[mod_name] = module
    try:
        code = compile(source, path, "exec")
        import torch  # noqa: F401 - loaded before the clock starts: its import time is not the problem's
        with time_limit(f"{path}: {IMPORT_CALL}"):
            exec(code, module.__dict__)
    except BaseException as exc:  # a broken file must never take the caller down
        sys.modules.pop(mod_name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        if isinstance(exc, TimeLimitExceeded):
            raise ProblemError(str(exc)) from None
        if isinstance(exc, SyntaxError):
            raise ProblemError(f"{path}:{exc.lineno}: syntax error: {exc.msg}") from None
        raise ProblemError(f"{path}: failed to import: {_one_line(exc)}") from None
    return module


def _level_and_id(path: Path) -> tuple[int | None, int | None]:
    m = _KB_NAME.match(path.stem)
    problem_id = int(m.group(1)) if m else None
    lm = _LEVEL_DIR.match(path.parent.name)
    level = int(lm.group(1)) if lm else None
    return level, problem_id


def load_problem(path: str | Path, default_tolerance: float | None = None, suite: str | None = None) -> Problem:
    """Load one KernelBench-format file. Raises ``ProblemError`` (one line, naming the file)."""
    p = Path(path)
    if not p.exists():
        raise ProblemError(f"{p}: no such file")
    if p.is_dir():
        raise ProblemError(f"{p}: is a folder; load a folder with load_folder or pass a .py file")
    if p.suffix != ".py":
        raise ProblemError(f"{p}: not a Python file (expected a KernelBench problem .py)")
    try:
        source = p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(f"{p}: cannot read: {_one_line(exc)}") from None
    module = _import_source(source, str(p.resolve()))
    missing = [n for n in REQUIRED_NAMES if not hasattr(module, n)]
    if missing:
        raise ProblemError(
            f"{p}: not a KernelBench problem: missing {', '.join(missing)} "
            f"(a problem defines class Model, get_inputs() and get_init_inputs())"
        )
    if not isinstance(module.Model, type):
        raise ProblemError(f"{p}: Model must be a class (an nn.Module subclass)")
    for fn in ("get_inputs", "get_init_inputs"):
        if not callable(getattr(module, fn)):
            raise ProblemError(f"{p}: {fn} must be a function")
    tolerance = getattr(module, "TOLERANCE", None)
    if tolerance is None:
        tolerance = DEFAULT_TOLERANCE if default_tolerance is None else default_tolerance
    try:
        tolerance = float(tolerance)
        if not tolerance > 0:
            raise ValueError
    except (TypeError, ValueError):
        raise ProblemError(f"{p}: TOLERANCE must be a positive number, got {tolerance!r}") from None
    precisions = getattr(module, "ALLOWED_PRECISIONS", None)
    if precisions is None:
        precisions = default_precisions(tolerance)
    if isinstance(precisions, str):
        precisions = (precisions,)
    precisions = tuple(precisions)
    unknown = [x for x in precisions if x not in ALL_PRECISIONS]
    if unknown or not precisions:
        raise ProblemError(
            f"{p}: ALLOWED_PRECISIONS has {unknown or 'nothing'}; expected a non-empty subset of {list(ALL_PRECISIONS)}"
        )
    level, problem_id = _level_and_id(p)
    return Problem(
        name=p.stem,
        path=str(p.resolve()),
        source=source,
        module=module,
        tolerance=tolerance,
        allowed_precisions=precisions,
        level=level,
        problem_id=problem_id,
        suite=suite,
    )


def _check_here(path: str, default_tolerance: float | None, suite: str | None) -> None:
    """In the checking child: load the problem and count its work on meta tensors, which calls
    ``get_init_inputs()``, ``Model()``, ``get_inputs()`` and the forward, as the commands do next."""
    problem = load_problem(path, default_tolerance=default_tolerance, suite=suite)
    from sol_models.counting import ProblemLoadError, count_problem

    try:
        count_problem(problem)
    except ProblemLoadError as exc:
        raise ProblemSetupError(str(exc)) from None


def check_problem(path: str | Path, default_tolerance: float | None = None, suite: str | None = None,
                  calls: ChildCalls | None = None) -> None:
    """Load and set up a problem in a child process (``calls``, else one made for it) under a hard time limit:
    ``ProblemError`` when its file does not load, ``ProblemSetupError`` when its setup fails or a call does not
    return (the child is killed then, whatever the call does with interruptions). One line each, naming the
    file and the call."""
    from sol_models.counting import warm_up

    warm_up()  # here, before the child is forked: it starts warm, and so does this process's own count later
    owned = calls is None
    calls = calls or ChildCalls()
    try:
        calls.call(_check_here, str(path), default_tolerance, suite)
    except (TimeLimitExceeded, ChildDied) as exc:
        raise (ProblemError if f": {IMPORT_CALL} " in str(exc) else ProblemSetupError)(str(exc)) from None
    except ProblemError:
        raise
    except Exception as exc:  # noqa: BLE001 - whatever else the child could not do with the file
        raise ProblemError(f"{path}: cannot be loaded: {_one_line(exc)}") from None
    finally:
        if owned:
            calls.close()


def _load_checked(path: Path, default_tolerance: float | None, suite: str | None,
                  calls: ChildCalls | None) -> Problem:
    """``load_problem``, after ``check_problem`` in ``calls`` when given: a problem whose setup failed there is
    loaded with ``setup_error`` set, and its setup code never runs here."""
    setup_error = ""
    if calls is not None:
        try:
            check_problem(path, default_tolerance, suite, calls)
        except ProblemSetupError as exc:
            setup_error = str(exc)
    problem = load_problem(path, default_tolerance=default_tolerance, suite=suite)
    problem.setup_error = setup_error
    return problem


def problem_files(folder: Path) -> list[Path]:
    # KernelBench keeps superseded versions next to the current ones as ``<id>_<Name>_OLD.py``.
    files = [f for f in folder.glob("*.py") if not f.name.startswith(("_", ".")) and not f.stem.endswith("_OLD")]

    def order(f: Path):
        m = _KB_NAME.match(f.stem)
        return (0, int(m.group(1)), f.name) if m else (1, 0, f.name)

    return sorted(files, key=order)


def load_folder(path: str | Path, default_tolerance: float | None = None, suite: str | None = None,
                calls: ChildCalls | None = None) -> list[Problem]:
    """Every problem file in a folder (not recursive), KernelBench ids in numeric order."""
    folder = Path(path)
    if not folder.is_dir():
        raise ProblemError(f"{folder}: no such folder")
    files = problem_files(folder)
    if not files:
        raise ProblemError(f"{folder}: no problem files (*.py) in this folder")
    return [_load_checked(f, default_tolerance, suite, calls) for f in files]


def parse_ids(ids: str | Iterable[int] | None) -> list[int] | None:
    """``"1-20,25"`` -> [1..20, 25]; an iterable of ints passes through; None means all."""
    if ids is None:
        return None
    if not isinstance(ids, str):
        return sorted({int(i) for i in ids})
    out: set[int] = set()
    for part in ids.replace(" ", "").split(","):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
        if not m:
            raise ProblemError(f"--ids {ids!r}: cannot read {part!r}; write ids like 1-20,25")
        lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
        if hi < lo:
            raise ProblemError(f"--ids {ids!r}: range {part!r} runs backwards; write low-high")
        out.update(range(lo, hi + 1))
    return sorted(out)


def kernelbench_level_dir(root: str | Path, level: int) -> Path:
    """Find ``level<N>`` in a KernelBench checkout, its ``KernelBench/`` folder, or the level folder itself."""
    r = Path(root)
    candidates = [r / "KernelBench" / f"level{level}", r / f"level{level}", r]
    for c in candidates:
        if c.is_dir() and _LEVEL_DIR.match(c.name) and int(_LEVEL_DIR.match(c.name).group(1)) == level:
            return c
    raise ProblemError(
        f"{r}: no level{level} folder found (looked for KernelBench/level{level} and level{level}); "
        f"pass the root of a KernelBench checkout"
    )


def load_kernelbench(
    root: str | Path, level: int, ids: str | Iterable[int] | None = None, default_tolerance: float | None = None,
    calls: ChildCalls | None = None,
) -> list[Problem]:
    """Problems ``ids`` (all when None) of one KernelBench level, in id order."""
    folder = kernelbench_level_dir(root, int(level))
    wanted = parse_ids(ids)
    by_id: dict[int, Path] = {}
    for f in problem_files(folder):
        m = _KB_NAME.match(f.stem)
        if m:
            by_id[int(m.group(1))] = f
    if not by_id:
        raise ProblemError(f"{folder}: no KernelBench problems in this folder (files named <id>_<name>.py); pass the "
                           "root of a KernelBench checkout")
    if wanted is None:
        wanted = sorted(by_id)
    if not wanted:
        raise ProblemError(f"--ids {ids!r}: selects no problem; write ids like 1-20,25")
    missing = [i for i in wanted if i not in by_id]
    if missing:
        raise ProblemError(f"{folder}: no problem with id {', '.join(map(str, missing))} in level {level}")
    return [_load_checked(by_id[i], default_tolerance, None, calls) for i in wanted]


def suite_index() -> dict[str, dict]:
    """The suites shipped with mucutlass (``suites/index.toml``): name -> {path, tolerance, description}."""
    try:
        return tomllib.loads(SUITES_INDEX.read_text(encoding="utf-8")).get("suite", {})
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProblemError(f"{SUITES_INDEX}: cannot read the suite index: {_one_line(exc)}") from None


def suite_files(name: str) -> list[Path]:
    """The problem files of a named suite, unloaded (`mucutlass trace --suite` traces each in a child process)."""
    index = suite_index()
    if name not in index:
        raise ProblemError(f"unknown suite {name!r}; known suites: {', '.join(sorted(index)) or 'none'}")
    files = problem_files(SUITES_DIR / index[name].get("path", name))
    only = index[name].get("problems")
    return [f for f in files if f.stem in only] if only else files


def load_suite(name: str, calls: ChildCalls | None = None) -> list[Problem]:
    """A named suite (``builtin``, ``builtin-strict``) from ``suites/index.toml``."""
    index = suite_index()
    if name not in index:
        raise ProblemError(f"unknown suite {name!r}; known suites: {', '.join(sorted(index)) or 'none'}")
    entry = index[name]
    folder = SUITES_DIR / entry.get("path", name)
    tolerance = float(entry.get("tolerance", DEFAULT_TOLERANCE))
    problems = load_folder(folder, default_tolerance=tolerance, suite=name, calls=calls)
    if entry.get("force_tolerance", False):
        # A stricter variant of a suite: its tolerance wins over the files'
        for p in problems:
            impose_tolerance(p, tolerance)
    only = entry.get("problems")
    if only:
        by_name = {p.name: p for p in problems}
        unknown = [n for n in only if n not in by_name]
        if unknown:
            raise ProblemError(f"suite {name!r} lists unknown problems: {', '.join(unknown)}")
        problems = [by_name[n] for n in only]
    return problems


def impose_tolerance(problem: Problem, tolerance: float) -> None:
    """Judge ``problem`` at ``tolerance``: it wins over the file's, and precisions that cannot meet it are dropped."""
    allowed = default_precisions(tolerance)
    problem.tolerance = tolerance
    problem.allowed_precisions = tuple(x for x in problem.allowed_precisions if x in allowed) or allowed


# Tolerance rules a whole selection can be judged under: rule -> the tolerance (atol = rtol) per the element type
# of the reference's floating inputs. KernelBench's (since Nov 2025): fp32 problems at 1e-4, fp16 / bf16 at 1e-2.
TOLERANCE_RULES: dict[str, dict[str, float]] = {"kernelbench": {"f32": 1e-4, "f16": 1e-2, "bf16": 1e-2}}


def input_element_type(problem: Problem) -> str:
    """The element type of the problem's first floating input (``get_inputs()`` on the meta device); f32 when it
    has none or its inputs cannot be made there."""
    import torch

    names = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}
    try:
        with torch.device("meta"):
            inputs = list(problem.module.get_inputs())
    except Exception:  # noqa: BLE001 - inputs made on a device of their own: the fp32 default
        return "f32"
    return next((names.get(x.dtype, "f32") for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()), "f32")


def apply_tolerance_rule(problems: list[Problem], rule: str) -> list[Problem]:
    """Every problem at the tolerance ``rule`` (a key of TOLERANCE_RULES) gives its input type; "default" keeps
    each problem's own."""
    if rule == "default":
        return problems
    if rule not in TOLERANCE_RULES:
        raise ProblemError(f"unknown tolerance rule {rule!r}; known: default, {', '.join(TOLERANCE_RULES)}")
    by_type = TOLERANCE_RULES[rule]
    for p in problems:
        impose_tolerance(p, by_type.get(input_element_type(p), by_type["f32"]))
    return problems


def load_problems(
    target: str | Path | None = None,
    *,
    suite: str | None = None,
    kernelbench: str | Path | None = None,
    level: int | None = None,
    ids: str | Iterable[int] | None = None,
    default_tolerance: float | None = None,
    check: bool = False,
) -> list[Problem]:
    """The one entry point for command lines: a file, a folder, a suite, or a KernelBench selection. With
    ``check``, each problem is first loaded and set up in one child process (``check_problem``): one whose
    file does not load raises ``ProblemError``, one whose setup fails comes back with ``setup_error`` set."""
    chosen = sum(x is not None for x in (target, suite, kernelbench))
    if chosen != 1:
        raise ProblemError("give exactly one of: a problem file or folder, --suite NAME, --kernelbench PATH")
    if kernelbench is not None and level is None:
        raise ProblemError("--kernelbench needs --level N (1, 2, 3 or 4)")
    with ChildCalls() if check else contextlib.nullcontext() as calls:
        if suite is not None:
            return load_suite(suite, calls)
        if kernelbench is not None:
            return load_kernelbench(kernelbench, level, ids, default_tolerance=default_tolerance, calls=calls)
        p = Path(target)
        if p.is_dir():
            return load_folder(p, default_tolerance=default_tolerance, calls=calls)
        return [_load_checked(p, default_tolerance, None, calls)]
