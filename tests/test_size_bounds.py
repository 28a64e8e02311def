"""Checks bound every tensor's size: against the target's device memory (targets/*.toml) and, for a
program output, against the problem's outputs, so a memory bomb written in the language is refused
with a located diagnostic before any worker allocates it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from dsl_compiler.checks import check_text, load_target

ROOT = Path(__file__).resolve().parent.parent
HUGE = 2**62

PAD_BOMB = """program padbomb
input a: f32[64, 128]
input b: f32[256, 128]
kernel mm = gemm(a, b^T) { math = tf32; store y: f32 = acc }
torch z = pad(y, (0, 25000000))
output z
"""
PROBLEM = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b.T


def get_inputs():
    return [torch.rand(64, 128), torch.rand(256, 128)]


def get_init_inputs():
    return []
"""


def errors(text: str, **kw):
    _, diags = check_text(text, backend="interpreter", **kw)
    return [d for d in diags if d.severity == "error"]


def test_the_target_describes_its_memory():
    assert load_target("sm90a").max_memory_bytes >= 80 * 10**9


def test_a_declared_dimension_of_2_to_the_62_is_refused_where_it_is_written():
    text = (f"program bomb\ninput x: f32[{HUGE}, 64]\nparam w: f32[32, 64] = \"fc.weight\"\n"
            "kernel k = gemm(x, w^T) { math = tf32; store y: f32 = acc }\noutput y\n")
    errs = errors(text)
    assert len(errs) == 1 and errs[0].code == "size" and errs[0].span.line == 2
    assert "'x'" in errs[0].message and "device memory" in errs[0].message and errs[0].hint


@pytest.mark.parametrize("digits", [310, 320, 1000, 5000])
def test_a_dimension_of_hundreds_or_thousands_of_digits_is_a_located_size_error(digits):
    # past a float (about 309 digits) the byte count, past 4300 digits Python's int conversion, fails unless handled
    text = (f"program bomb\ninput x: f32[{'9' * digits}, 64]\nparam w: f32[32, 64] = \"fc.weight\"\n"
            "kernel k = gemm(x, w^T) { math = tf32; store y: f32 = acc }\noutput y\n")
    errs = errors(text)
    assert len(errs) == 1 and errs[0].code == "size" and errs[0].span.line == 2 and errs[0].hint


def test_a_torch_step_past_device_memory_is_refused():
    errs = errors(PAD_BOMB.replace("25000000", str(2**40)))  # 64 x 2^40 f32: 256 TiB
    assert len(errs) == 1 and errs[0].code == "size" and errs[0].span.line == 5 and "device memory" in errs[0].message
    errs = errors(PAD_BOMB.replace("25000000", str(HUGE)))  # past what torch can size at all: still one located error
    assert len(errs) == 1 and errs[0].span.line == 5


def test_an_output_larger_than_the_problems_outputs_is_refused():
    assert not errors(PAD_BOMB)  # 6 GiB fits the GPU: only the problem's outputs bound it
    errs = errors(PAD_BOMB, max_output_bytes=64 * 256 * 4)
    assert len(errs) == 1 and errs[0].code == "size" and errs[0].span.line == 5
    assert "output 'z'" in errs[0].message and "problem's outputs" in errs[0].message
    assert not errors(PAD_BOMB.replace("torch z = pad(y, (0, 25000000))\noutput z", "output y"),
                      max_output_bytes=64 * 256 * 4)


def test_check_command_rejects_huge_dimensions_with_a_location_and_a_hint(tmp_path):
    path = tmp_path / "bomb.mcu"
    path.write_text(f"program bomb\ninput x: f32[{HUGE}, {HUGE}]\ntorch y = relu(x)\noutput y\n")
    done = subprocess.run([sys.executable, "-m", "mucutlass", "check", str(path)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 1
    out = done.stdout + done.stderr
    assert f"{path}:2:" in out and "error[size]" in out and "hint:" in out and "Traceback" not in out


def test_the_graph_refuses_a_pad_bomb_at_check_before_any_worker_runs_it(tmp_path):
    problem = tmp_path / "mm.py"
    problem.write_text(PROBLEM)
    programs = tmp_path / "programs"
    programs.mkdir()
    (programs / "01.mcu").write_text(PAD_BOMB)
    run = tmp_path / "run"
    done = subprocess.run([sys.executable, "-m", "mucutlass", "optimize", str(problem), "--tier",
                           f"playback:{programs}", "--backend", "interpreter", "--max-attempts", "1", "--out", str(run)],
                          capture_output=True, text=True, timeout=180, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    [attempt] = json.loads((run / "attempts.json").read_text())
    assert not attempt["compile_ok"] and attempt["failure_reason"].startswith("check: output 'z'")
