"""The candidate process's guards (evals.judge.candidate): a guarded function kept as the same object but with
its code, defaults or closure changed is seen and put back, as is a replaced method of a class a module defines."""

from __future__ import annotations

import types

from evals.judge import candidate


def _toy_module():
    mod = types.ModuleType("toy_guarded")
    exec(
        "def scale(x, factor=2.0, *, offset=0.0):\n"
        "    return x * factor + offset\n"
        "def make():\n"
        "    limit = 10\n"
        "    def clamp(x):\n"
        "        return min(x, limit)\n"
        "    return clamp\n"
        "clamp = make()\n"
        "class Meter:\n"
        "    def read(self):\n"
        "        return 1.0\n",
        mod.__dict__,
    )
    return mod


def test_an_untouched_module_is_clean():
    mod = _toy_module()
    table = candidate._module_functions(mod)
    assert candidate.changed_functions(table) == []


def test_swapped_code_defaults_kwdefaults_and_closure_are_seen_and_put_back():
    mod = _toy_module()
    table = candidate._module_functions(mod)
    scale, clamp = mod.scale, mod.clamp
    scale.__code__ = (lambda x, factor=2.0, *, offset=0.0: 0.0).__code__
    assert candidate.changed_functions(table) == ["toy_guarded.scale"]
    assert mod.scale is scale and scale(3.0) == 6.0
    scale.__defaults__ = (0.5,)
    scale.__kwdefaults__["offset"] = 1.0  # changed in place: the same dict
    assert candidate.changed_functions(table) == ["toy_guarded.scale"]
    assert scale(3.0) == 6.0
    clamp.__closure__[0].cell_contents = 10**9
    assert candidate.changed_functions(table) == ["toy_guarded.clamp"]
    assert clamp(50) == 10
    assert candidate.changed_functions(table) == []


def test_a_replaced_class_method_is_seen_and_put_back():
    mod = _toy_module()
    table = candidate._module_functions(mod)
    original = mod.Meter.read
    mod.Meter.read = lambda self: 0.25
    assert candidate.changed_functions(table) == ["toy_guarded.Meter.read"]
    assert mod.Meter.read is original
    mod.Meter.read.__code__ = (lambda self: 0.25).__code__
    assert candidate.changed_functions(table) == ["toy_guarded.Meter.read"]
    assert mod.Meter().read() == 1.0


def test_the_profiler_machinery_is_in_the_table():
    table = candidate._module_functions(*candidate._profiler_modules())
    names = {f"{candidate._owner_name(o)}.{a}" for o, a in table}
    assert "torch.profiler.profiler._KinetoProfile.events" in names
    assert "torch.autograd.profiler_util.FunctionEvent.__init__" in names
    assert "torch.autograd.profiler.profile._parse_kineto_results" in names
