"""benchmarks/bench_depthwise.py on the CPU: its arguments, the one line it stops with without a GPU, and that its
programs are the depthwise kernels it says (split off / on); the timings need the GPU."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

import bench_depthwise  # noqa: E402


@pytest.mark.parametrize("argv", [[], ["--out", "x", "--shapes", "resnet"], ["--out", "x", "--calls", "0"],
                                  ["--out", "x", "--jobs", "-1"]])
def test_bad_arguments_stop_with_a_usage_error(argv, capsys):
    with pytest.raises(SystemExit) as exc:
        bench_depthwise.parse_args(argv)
    assert exc.value.code == 2
    assert "usage:" in capsys.readouterr().err


def test_arguments_default_to_the_three_measured_shapes():
    args = bench_depthwise.parse_args(["--out", "/tmp/x", "--shapes", "builtin28", "mobilenetv2"])
    assert args.shapes == ["builtin28", "mobilenetv2"] and args.calls == 50
    assert bench_depthwise.parse_args(["--out", "o"]).shapes == ["mobilenetv2", "efficientnet", "builtin28"]


def test_without_a_gpu_it_stops_with_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert bench_depthwise.main(["--out", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert captured.err.strip() == bench_depthwise.NO_GPU and "\n" not in captured.err.strip() and not captured.out
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", list(bench_depthwise.SHAPES))
def test_each_shape_is_one_depthwise_kernel_that_the_split_setting_changes(name, monkeypatch):
    from dsl_compiler.checks import check
    from dsl_compiler.cutlass.emit import emit_program

    prog = bench_depthwise.program(name)
    n, c, h, w, _, _ = bench_depthwise.SHAPES[name]
    assert not [d for d in check(prog) if d.severity == "error"]
    assert prog.inputs[0].shape == (n, c, h, w) and prog.kernels[0].op.groups == c
    sources = {}
    for split in bench_depthwise.SPLITS:
        monkeypatch.setenv("MUCUTLASS_DEPTHWISE_SPLIT", split)
        (e,), diags = emit_program(prog)
        assert not diags
        sources[split] = e.source
    assert "DefaultDepthwiseDirect2dConvFprop" in sources["off"] and "mu_slices" not in sources["off"]
    assert "mu_slices(I(0), P, Q, I(5))" in sources["on"]


def test_the_kernel_reads_the_benchmarks_tensors_in_place():
    """The timed call copies nothing: conv_call_args takes x and the filter as they are (channels-last)."""
    from dsl_compiler.cutlass_runtime import conv_call_args

    kernel_name, op, abi = bench_depthwise.call_spec("efficientnet")
    x, weight, bias, env = bench_depthwise.tensors("efficientnet", "cpu")
    tensors, ints, results = conv_call_args(kernel_name, op, abi, env, {})
    # the same memory (views, no copies) for x, the filter and the bias
    assert [t.data_ptr() for t in tensors[:2]] == [env["x"].data_ptr(), env["w"].data_ptr()]
    assert tensors[3].data_ptr() == bias.data_ptr()
    assert ints[:6] == [4, 1, 112, 112, 192, 192] and tuple(results["y"].shape) == (4, 192, 112, 112)
    assert (env["x"] == x).all()


def test_table_shows_each_setting_and_a_failed_build():
    ok = {"t_us": 2300.0, "tb_s": 0.067, "correct": True}
    row = {"shape": "mobilenetv2", "nchw": [2, 192, 224, 224], "epilogue": "relu6", "profiled_us": "2213", "bytes": 1,
           "at_bandwidth_us": 32.1, "ours_split_off": ok, "ours_split_on": {"error": "nvcc: out of registers"},
           "torch_channels_last": {"t_us": 40.0, "tb_s": 3.85}, "torch_contiguous": {"t_us": 90.0, "tb_s": 1.7}}
    doc = {"gpu": "h200", "date": "2026-12-02", "build_s": 80.0, "builds": [{}, {}], "conv": [row],
           "var_mean": {"bytes": 77e6, "at_bandwidth_us": 16.1, "profiled_us": "298", "dims_0_2_3_us": 290.0,
                        "nhwc_rows_dim_0_us": 20.0, "same_result": True}}
    md = bench_depthwise.to_markdown(doc)
    (line,) = [ln for ln in md.splitlines() if ln.startswith("| mobilenetv2")]
    assert "| 2300.0 (0.067 TB/s) | nvcc: out of registers | 40.0 (3.85 TB/s) | 90.0 (1.7 TB/s) | True / - |" in line
    assert "290.0 us" in md and "20.0 us" in md and "same result: True" in md
