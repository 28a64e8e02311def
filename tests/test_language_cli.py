"""`mucutlass check`, `fmt` and `interpret`: output, exit codes (0 ok, 1 program errors, 2 usage)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from mucutlass.cli import main

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_check_ok(capsys):
    code, out, _ = run_cli(capsys, "check", str(EXAMPLES / "mlp.mcu"))
    assert code == 0 and "ok (2 kernels, 0 torch steps" in out


def test_check_reports_errors_with_location(capsys, tmp_path):
    bad = tmp_path / "bad.mcu"
    bad.write_text((EXAMPLES / "gemm_bias_gelu.mcu").read_text().replace("128x128x32", "96x128x32"))
    code, _, err = run_cli(capsys, "check", str(bad))
    assert code == 1
    assert f"{bad}:10:3: error[tile]" in err and "hint:" in err and "2 errors" in err  # M rule + cooperative rule


def test_check_backend_choice(capsys, tmp_path):
    # a depthwise conv with a channel multiplier (K = 2C): the language allows it, the CUTLASS backend does not build it
    multiplier = tmp_path / "depthwise_x2.mcu"
    multiplier.write_text((EXAMPLES / "depthwise_conv.mcu").read_text().replace("w: f32[16, 1, 3, 3]", "w: f32[32, 1, 3, 3]"))
    code, _, err = run_cli(capsys, "check", str(multiplier))
    assert code == 1 and "error[unsupported]" in err
    code, out, _ = run_cli(capsys, "check", "--backend", "interpreter", str(multiplier))
    assert code == 0 and "ok" in out
    code, out, _ = run_cli(capsys, "check", str(EXAMPLES / "depthwise_conv.mcu"))
    assert code == 0 and "ok" in out


def test_check_json(capsys, tmp_path):
    bad = tmp_path / "bad.mcu"
    bad.write_text("input x: f32[4, 4]\noutput y\n")
    code, out, _ = run_cli(capsys, "check", "--json", str(bad))
    assert code == 1
    diags = json.loads(out)
    assert diags[0]["code"] == "undefined-name" and diags[0]["hint"]


@pytest.mark.parametrize("content", [b"", b"\x00\xff\xfe garbage \x80", b"kernel {{{{", "π ∑ ⚡".encode()])
def test_check_bad_files_exit_1_without_traceback(capsys, tmp_path, content):
    f = tmp_path / "x.mcu"
    f.write_bytes(content)
    code, out, err = run_cli(capsys, "check", str(f))
    assert code == 1 and "error[syntax]" in err and "Traceback" not in err + out


def test_usage_errors_exit_2(capsys, tmp_path):
    assert run_cli(capsys, "check", str(tmp_path / "missing.mcu"))[0] == 2
    assert run_cli(capsys, "check", str(tmp_path))[0] == 2
    assert run_cli(capsys, "check", "--target", "sm00", str(EXAMPLES / "mlp.mcu"))[0] == 2
    assert run_cli(capsys, "interpret", str(EXAMPLES / "mlp.mcu"), "--problem", str(tmp_path / "none.py"))[0] == 2
    with pytest.raises(SystemExit) as exc:
        main(["check"])
    assert exc.value.code == 2


def test_check_reads_stdin(capsys, monkeypatch):
    import io

    monkeypatch.setattr(sys, "stdin", io.StringIO((EXAMPLES / "batched_gemm.mcu").read_text()))
    code, out, _ = run_cli(capsys, "check", "-")
    assert code == 0 and out.startswith("<stdin>: ok")


def test_fmt_prints_canonical_text_and_checks(capsys, tmp_path):
    code, out, _ = run_cli(capsys, "fmt", str(EXAMPLES / "batched_gemm.mcu"))
    # the shipped example is canonical, its comments included
    assert code == 0 and out == (EXAMPLES / "batched_gemm.mcu").read_text() and "\nprogram batched_gemm\n" in out
    assert run_cli(capsys, "fmt", "--check", str(EXAMPLES / "batched_gemm.mcu"))[0] == 0
    squeezed = tmp_path / "c.mcu"
    squeezed.write_text(out.replace("\n\n", "\n"))
    assert run_cli(capsys, "fmt", "--check", str(squeezed))[0] == 1
    messy = tmp_path / "m.mcu"
    messy.write_text("input x: f32[4,4]   kernel k=gemm(x,x){math=tf32 store y:f32=acc}output y")
    assert run_cli(capsys, "fmt", "-w", str(messy))[0] == 0
    assert messy.read_text() == (
        "input x: f32[4, 4]\n\nkernel k = gemm(x, x) {\n  math = tf32\n  store y: f32 = acc\n}\n\noutput y\n")


def test_fmt_takes_many_files(capsys, tmp_path):
    examples = sorted(str(p) for p in EXAMPLES.glob("*.mcu"))
    assert len(examples) > 3 and run_cli(capsys, "fmt", "--check", *examples)[0] == 0
    messy = []
    for name in ("a.mcu", "b.mcu"):
        messy.append(tmp_path / name)
        messy[-1].write_text("input x: f32[4,4]   kernel k=gemm(x,x){math=tf32 store y:f32=acc}output y")
    code, out, err = run_cli(capsys, "fmt", "--check", *examples, *map(str, messy))
    assert code == 1 and out == ""
    listed = [line.split(":")[0] for line in err.splitlines()]
    assert listed == [str(p) for p in messy]  # the files that would change, and only those
    assert run_cli(capsys, "fmt", "-w", *map(str, messy))[0] == 0
    assert run_cli(capsys, "fmt", "--check", *map(str, messy))[0] == 0
    code, _, err = run_cli(capsys, "fmt", "--check", str(messy[0]), str(tmp_path / "missing.mcu"))
    assert code == 2 and "missing.mcu: no such file" in err


def test_check_of_a_problem_file_says_what_it_is(capsys):
    problem = ROOT / "evals" / "suites" / "smoke" / "01_gemm_tiny.py"
    for command in ("check", "fmt"):
        code, out, err = run_cli(capsys, command, str(problem))
        assert code == 2 and "syntax" not in err
        assert err.strip() == (f"error: {problem}: not a μCUTLASS file (a .py is a problem; try `mucutlass trace "
                               f"{problem}` or `mucutlass sol {problem}`)")


def test_fmt_of_a_broken_program(capsys, tmp_path):
    f = tmp_path / "b.mcu"
    f.write_text("input x: f32[4\noutput x\n")
    code, _, err = run_cli(capsys, "fmt", str(f))
    assert code == 1 and "2:1: error[syntax]" in err


def test_interpret_passes_on_an_example(capsys):
    code, out, _ = run_cli(capsys, "interpret", str(EXAMPLES / "gemm_bias_gelu.mcu"),
                           "--problem", str(EXAMPLES / "gemm_bias_gelu.py"))
    assert code == 0
    assert "output y: shape [64, 256]  max abs error" in out and "PASS at tolerance 0.01" in out and "tf32" in out


def test_interpret_fails_a_wrong_program(capsys, tmp_path):
    wrong = tmp_path / "w.mcu"
    wrong.write_text((EXAMPLES / "mlp.mcu").read_text().replace("relu(acc + b1[col])", "acc + b1[col]"))
    code, out, _ = run_cli(capsys, "interpret", str(wrong), "--problem", str(EXAMPLES / "mlp.py"))
    assert code == 1 and "MISMATCH" in out and "FAIL" in out


def test_interpret_json_and_tolerance(capsys):
    code, out, _ = run_cli(capsys, "interpret", "--json", "--tolerance", "1e-9", str(EXAMPLES / "mlp.mcu"),
                           "--problem", str(EXAMPLES / "mlp.py"))
    result = json.loads(out)
    assert code == 1 and result["ok"] is False and result["tolerance"] == 1e-9  # TF32 cannot meet 1e-9


def test_interpret_reports_binding_and_problem_errors(capsys, tmp_path):
    program = tmp_path / "p.mcu"
    program.write_text((EXAMPLES / "gemm_bias_gelu.mcu").read_text().replace('"fc.weight"', '"linear.weight"'))
    code, _, err = run_cli(capsys, "interpret", str(program), "--problem", str(EXAMPLES / "gemm_bias_gelu.py"))
    assert code == 1 and "no state_dict key 'linear.weight'" in err
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    code, _, err = run_cli(capsys, "interpret", str(EXAMPLES / "mlp.mcu"), "--problem", str(broken))
    assert code == 1 and err.startswith("error:") and "Traceback" not in err


def test_interpret_refuses_a_program_with_undefined_names(capsys, tmp_path):
    program = tmp_path / "p.mcu"
    program.write_text((EXAMPLES / "mlp.mcu").read_text().replace("gemm(h, w2^T)", "gemm(hidden, w2^T)"))
    code, _, err = run_cli(capsys, "interpret", str(program), "--problem", str(EXAMPLES / "mlp.py"))
    assert code == 1 and "error[undefined-name]" in err


def test_cli_module_imports_no_torch():
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    code = "import sys, dsl_compiler.cli; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, env=env, timeout=60)
    assert result.stdout.strip() == "False", result.stderr


def test_interpret_device_and_input_mismatch(capsys, tmp_path):
    assert run_cli(capsys, "interpret", str(EXAMPLES / "mlp.mcu"), "--problem", str(EXAMPLES / "mlp.py"),
                   "--device", "banana")[0] == 2
    program = tmp_path / "p.mcu"
    program.write_text((EXAMPLES / "mlp.mcu").read_text().replace("input x: f32[64, 128]", "input x: f32[32, 128]")
                       .replace("param w1", "input extra: f32[2]\nparam w1"))
    code, _, err = run_cli(capsys, "interpret", str(program), "--problem", str(EXAMPLES / "mlp.py"))
    assert code == 1 and "does not fit the problem's inputs" in err


def test_interpret_reports_a_wrong_output_shape(capsys, tmp_path):
    program = tmp_path / "p.mcu"
    program.write_text("""input x: f32[64, 128]
param w: f32[256, 128] = "fc.weight"
kernel fc = gemm(x, w^T) { math = tf32; store y: f32 = acc; store s: f32 = row_sum(acc) }
output s
""")
    code, out, _ = run_cli(capsys, "interpret", str(program), "--problem", str(EXAMPLES / "gemm_bias_gelu.py"))
    assert code == 1 and "MISMATCH (shape [64] against the reference's [64, 256])" in out


def test_interpret_worst_over_allowed_agrees_with_pass(capsys):
    code, out, _ = run_cli(capsys, "interpret", "--json", str(EXAMPLES / "mlp.mcu"), "--problem", str(EXAMPLES / "mlp.py"))
    row = json.loads(out)["outputs"][0]
    assert code == 0 and row["ok"] and 0 < row["worst_over_allowed"] <= 1
