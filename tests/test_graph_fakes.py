"""Small fakes of the libraries the graph calls (checks, harness, SOL), injected through the run
context, plus scripted chat models. The graph, its nodes, policies and tiers run for real.

Fake programs carry their fate in comments: ``# broken`` fails the check with a located
diagnostic, ``# wrong`` fails validation (``# judge fails``: the judge itself fails on it), ``# t_us = 40`` is the time the fake profiler reports.
"""

from __future__ import annotations

import re
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage

from dsl_compiler.diagnostics import Diagnostic
from dsl_compiler.ir import GemmOp, Kernel, KernelConfig, Operand, Program, Ref, Span, Store, TensorDecl
from graph.context import Services

PROBLEM_SOURCE = '''
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(64, 32)

    def forward(self, x):
        return torch.relu(self.fc(x))

def get_inputs():
    return [torch.rand(16, 64)]

def get_init_inputs():
    return []
'''

BROKEN = "program p  # broken\ninput x: f32[16, 64]\nkernel k = gemm(x, w^T) { store y: f32 = acc }\noutput y\n"
SLOW = "program p  # t_us = 80\ninput x: f32[16, 64]\nkernel k = gemm(x, w^T) { tile = 64x64x32; store y: f32 = acc }\noutput y\n"
GOOD = "program p  # t_us = 12\ninput x: f32[16, 64]\nkernel k = gemm(x, w^T) { math = tf32; store y: f32 = acc }\noutput y\n"
JUDGE_FAILS = "program p  # judge fails\ninput x: f32[16, 64]\nkernel k = gemm(x, w^T) { store y: f32 = acc }\noutput y\n"
WRONG = "program p  # wrong\ninput x: f32[16, 64]\nkernel k = gemm(x, w^T) { store y: f32 = acc }\noutput y\n"

SOL = {"t_sol_us": 10.0, "bound": "compute", "intensity_flop_per_byte": 20.0, "flops": 65536.0}
REFERENCE_US = {"eager_fp32": 100.0, "eager_tf32": 50.0}


def write_problem(tmp_path: Path) -> Path:
    path = tmp_path / "linear_relu.py"
    path.write_text(PROBLEM_SOURCE)
    return path


class FakeProblem:
    def __init__(self, path: str):
        self.path = path
        self.name = Path(path).stem
        self.key = self.name
        self.source = Path(path).read_text()
        self.tolerance = 1e-2
        self.allowed_precisions = ("f32", "tf32")


class FakeServices(Services):
    """Counts its calls, so tests can check the graph does each setup step once."""

    def __init__(self):
        super().__init__()
        self.calls: dict[str, int] = {}

    def _count(self, name):
        self.calls[name] = self.calls.get(name, 0) + 1

    def problem(self, path):
        if path not in self._problems:
            self._count("problem")
            self._problems[path] = FakeProblem(path)
        return self._problems[path]

    def _count_sol(self, problem, gpu):
        self._count("sol")
        return dict(SOL)

    def reference_timings(self, path):
        if path not in self._references:
            self._count("reference")
            self._references[path] = dict(REFERENCE_US)
        return self._references[path]

    def check_text(self, text, max_output_bytes=None):
        self._count("check")
        if "# broken" in text:
            return None, [Diagnostic(code="undefined-name", message="w is not declared", span=Span(line=3, column=21),
                                     found="w", expected="a declared input or param",
                                     hint="declare it: param w: f32[32, 64] = \"fc.weight\"")]
        tile = re.search(r"tile = (\d+)x(\d+)x(\d+)", text)
        math = re.search(r"math = (\w+)", text)
        program = Program(
            name="p",
            decls=(TensorDecl(kind="input", name="x", dtype="f32", shape=(16, 64)),),
            steps=(Kernel(name="k", op=GemmOp(a=Operand(name="x"), b=Operand(name="x", transpose=True)),
                          config=KernelConfig(math=math.group(1) if math else None,
                                              tile=tuple(int(g) for g in tile.groups()) if tile else None),
                          stores=(Store(name="y", dtype="f32", expr=Ref(name="x")),)),),
            outputs=("y",),
        )
        return program, []

    def candidate(self, program, backend, artifacts):
        return {"program": program, "backend": backend}

    def validate(self, path, candidate):
        self._count("validate")
        text = self._text_of(candidate)
        if "# wrong" in text:
            return {"correct": False, "max_abs_error": 3.5, "reason": "max abs error 3.5 > tolerance 0.01",
                    "rule": "mismatch"}
        if "# judge fails" in text:
            return {"correct": False, "max_abs_error": None, "judge_failed": True,
                    "reason": "the judge failed: OutOfMemoryError: CUDA out of memory"}
        return {"correct": True, "max_abs_error": 1e-4, "reason": None}

    def profile(self, path, candidate):
        self._count("profile")
        t = float(re.search(r"# t_us = ([\d.]+)", self._text_of(candidate)).group(1))
        return {"t_us": t, "t_spread_pct": 1.0, "timing_source": "estimate"}

    def _text_of(self, candidate):
        return self.last_text

    def close(self):
        self._count("close")


class TextTrackingServices(FakeServices):
    """The fake check remembers the text it last checked: the text validate/profile judge."""

    def check_text(self, text, max_output_bytes=None):
        self.last_text = text
        return super().check_text(text)


def reply(program: str, tokens_in: int = 1000, tokens_out: int = 200, prose: str = "Here it is.") -> AIMessage:
    return AIMessage(
        content=f"{prose}\n```mcu\n{program}```\n",
        usage_metadata={"input_tokens": tokens_in, "output_tokens": tokens_out, "total_tokens": tokens_in + tokens_out},
        response_metadata={"model_name": "fake-model"},
    )


def scripted_chat(*messages: AIMessage) -> GenericFakeChatModel:
    return GenericFakeChatModel(messages=iter(list(messages)))
