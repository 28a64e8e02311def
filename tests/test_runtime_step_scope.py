"""ProgramModule.step_scope: off by default (the steps run bare, the results unchanged); set, each step runs inside
the context it returns, once per step in program order, and the fused input casts inside one context of their own."""

from __future__ import annotations

import contextlib

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from dsl_compiler import interpreter, runtime
from dsl_compiler.parser import parse
from dsl_compiler.run_settings import RuntimeOptions

# a torch step, a conv kernel reading it, a gemm-free tail of torch steps: both step kinds, and an input cast
SOURCE = """program scoped

input x: f32[2, 4, 8, 8]
param conv_weight: f32[8, 4, 3, 3] channels_last = "conv.weight"
param conv_bias: f32[8] = "conv.bias"

torch x_cl = channels_last(x)

kernel t_conv = conv2d(x_cl, conv_weight, stride=(1, 1), padding=(1, 1), dilation=(1, 1), groups=1) {
  math = tf32
  store relu: f32 = relu(acc + conv_bias[col])
}

torch doubled = mul(relu, 2.0)
torch out = sigmoid(doubled)

output out
"""


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv = torch.nn.Conv2d(4, 8, 3, padding=1)


def _module(options: RuntimeOptions | None = None, executor=None):
    program, diags = parse(SOURCE)
    assert program is not None, diags
    params = runtime.bind_params(program, Model())
    if executor is None:
        return runtime.load(program, "interpreter", params, options=options)
    return runtime.ProgramModule(program, executor, params, options=options)


def _recorder(seen: list):
    def scope(step):
        seen.append(step)
        return contextlib.nullcontext()

    return scope


def test_off_by_default_and_the_same_results_with_it_on():
    module = _module()
    x = torch.rand(2, 4, 8, 8, generator=torch.Generator().manual_seed(1))
    assert module.step_scope is None
    bare = module(x)
    seen: list = []
    module.step_scope = _recorder(seen)
    scoped = module(x)
    assert torch.equal(bare, scoped)
    assert [id(s) for s in seen] == [id(s) for s in module.program.steps]  # each step once, in order
    module.step_scope = None
    seen.clear()
    module(x)
    assert seen == []


def test_a_step_runs_inside_its_scope():
    module = _module()
    x = torch.rand(2, 4, 8, 8)
    inside: list[tuple[str, bool]] = []
    active = [False]

    @contextlib.contextmanager
    def scope(step):
        active[0] = True
        yield
        active[0] = False

    run_kernel = module.executor.run_kernel

    def watched(program, kernel, env):
        inside.append((kernel.name, active[0]))
        return run_kernel(program, kernel, env)

    module.executor.run_kernel = watched
    module.step_scope = scope
    module(x)
    assert inside == [("t_conv", True)]


def test_one_profiler_range_per_step_per_call():
    module = _module()
    x = torch.rand(2, 4, 8, 8)
    position = {id(s): i for i, s in enumerate(module.program.steps)}
    module.step_scope = lambda step: record_function(f"step#{position[id(step)]}")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        module(x)
        module(x)
    names = [e.name for e in prof.events() if e.name.startswith("step#")]
    assert sorted(names) == sorted([f"step#{i}" for i in range(len(module.program.steps))] * 2)


class FusedCastExecutor(interpreter.InterpreterExecutor):
    """The interpreter, with the fused input casts run as one call (as the CUTLASS executor's library does)."""

    def __init__(self, program):
        super().__init__(program, None)
        self.fused_calls = 0

    def run_fused_casts(self, jobs, env):
        self.fused_calls += 1
        from dsl_compiler import torch_steps

        return {j["dst"]: torch_steps.channels_last(env[j["src"]]) if j["relayout"] else env[j["src"]] for j in jobs}


def test_the_fused_input_casts_run_in_one_scope_of_their_own():
    program, _ = parse(SOURCE)
    executor = FusedCastExecutor(program)
    module = _module(RuntimeOptions(fused_casts=True), executor)
    assert module.cast_jobs, "the channels_last of the input is a fused cast"
    x = torch.rand(2, 4, 8, 8)
    bare = module(x)
    seen: list = []
    module.step_scope = _recorder(seen)
    assert torch.equal(module(x), bare)
    assert executor.fused_calls == 2
    assert seen[0] is None  # the casts' one launch
    assert [id(s) for s in seen[1:]] == [id(s) for s in module.rest]
    assert len(seen) == len(program.steps)  # the one cast step ran fused, not again
