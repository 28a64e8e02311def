import math
import time
from pathlib import Path

import pytest

from run_vocabulary.problem import ProblemValue
from sol_models.counting import ProblemLoadError, count_problem

DATA = Path(__file__).parent / "data" / "sol"
ROOT = Path(__file__).resolve().parents[1]
F32 = 4


def conv_out(size, kernel, stride=1, padding=0, dilation=1):
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def test_gemm_flops_and_bytes_equal_closed_forms():
    m, k, n = 1024, 2048, 512
    w = count_problem(DATA / "gemm.py")
    assert w.flops == w.flops_tensor == 2 * m * n * k
    assert w.bytes_fused == F32 * (m * k + k * n + m * n)
    assert w.bytes_unfused == w.bytes_fused  # one op: nothing in between
    assert w.kernel_count == 1


def test_batched_gemm():
    b, m, k, n = 8, 256, 512, 128
    w = count_problem(DATA / "bmm.py")
    assert w.flops == 2 * b * m * n * k
    assert w.bytes_fused == F32 * b * (m * k + k * n + m * n)


def test_transposed_operands_count_as_plain_gemm():
    m, k, n = 768, 1536, 384
    w = count_problem(DATA / "gemm_transposed.py")
    assert w.flops == 2 * m * n * k
    assert w.bytes_fused == F32 * (k * m + n * k + m * n)


def test_conv2d_strided():
    n, c, k, h, wd, r = 4, 16, 32, 64, 48, 3
    p, q = conv_out(h, r, 2, 1), conv_out(wd, r, 2, 1)
    w = count_problem(DATA / "conv2d.py")
    assert w.flops == 2 * n * k * c * r * r * p * q
    assert w.bytes_fused == F32 * (n * c * h * wd + k * c * r * r + n * k * p * q)


def test_conv3d_with_bias():
    n, c, k, d, h, wd = 2, 8, 16, 16, 32, 32
    kt, kr, ks = 3, 5, 5
    z, p, q = conv_out(d, kt, 1, 1), conv_out(h, kr, 1, 2), conv_out(wd, ks, 1, 2)
    w = count_problem(DATA / "conv3d.py")
    assert w.flops_tensor == 2 * n * k * c * kt * kr * ks * z * p * q
    assert w.bytes_fused == F32 * (n * c * d * h * wd + k * c * kt * kr * ks + k + n * k * z * p * q)


def test_depthwise_conv_counts_one_input_channel_per_output():
    n, c, h, wd, r = 8, 64, 56, 56, 3
    w = count_problem(DATA / "depthwise_conv.py")
    assert w.flops == 2 * n * c * r * r * h * wd
    assert w.bytes_fused == F32 * (2 * n * c * h * wd + c * r * r)


def test_linear_gelu_fused_and_unfused_bytes_by_hand():
    b, i, o = 128, 1024, 512
    w = count_problem(DATA / "linear_gelu.py")
    assert w.flops_tensor == 2 * b * i * o
    assert w.flops_other == 5 * b * o  # gelu (erf form): 5 FLOPs per element
    assert w.bytes_fused == F32 * (b * i + o * i + o + b * o)
    # addmm reads x, W, bias and writes y; gelu reads y and writes the output
    assert w.bytes_unfused == F32 * (b * i + o * i + o + b * o) + F32 * 2 * b * o
    assert w.kernel_count == 2
    assert {r.op: r.kind for r in w.ops} == {"addmm": "matmul", "gelu": "elementwise"}


def test_three_layer_mlp():
    b, sizes = 64, [512, 1024, 256, 10]
    w = count_problem(DATA / "mlp3.py")
    pairs = list(zip(sizes, sizes[1:]))
    assert w.flops_tensor == sum(2 * b * i * o for i, o in pairs)
    assert w.flops_other == b * (1024 + 256)  # two ReLUs
    params = sum(i * o + o for i, o in pairs)
    assert w.bytes_fused == F32 * (b * 512 + params + b * 10)
    assert w.kernel_count == 5


def test_elementwise_problem_is_pure_traffic():
    w = count_problem(DATA / "relu.py")
    assert w.flops == 256 * 4096
    assert w.bytes_fused == w.bytes_unfused == F32 * 2 * 256 * 4096


def test_nothing_is_allocated(tmp_path):
    # three 16 GiB tensors: only the meta device can "run" this in a test
    src = (DATA / "gemm.py").read_text().replace("M, K, N = 1024, 2048, 512", "M, K, N = 65536, 65536, 65536")
    big = tmp_path / "huge_gemm.py"
    big.write_text(src)
    start = time.perf_counter()
    w = count_problem(big)
    assert w.flops == 2 * 65536**3
    assert time.perf_counter() - start < 30


def test_training_mode_batchnorm_and_dropout_are_counted(tmp_path):
    problem = tmp_path / "bn_dropout.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.bn = nn.BatchNorm1d(64)\n"
        "        self.drop = nn.Dropout(0.5)\n"
        "    def forward(self, x):\n"
        "        return self.drop(self.bn(x))\n\n"
        "def get_inputs():\n    return [torch.rand(32, 64)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    w = count_problem(problem)
    kinds = {r.op: r.kind for r in w.ops}
    assert kinds["native_batch_norm"] == "norm"
    assert "bernoulli" in kinds  # dropout is active: KernelBench never calls eval()
    assert w.flops_other >= 8 * 32 * 64


def test_lstm_is_counted_in_closed_form(tmp_path):
    problem = tmp_path / "lstm.py"
    problem.write_text(
        "import torch\nimport torch.nn as nn\n\n"
        "class Model(nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lstm = nn.LSTM(32, 64, 2, batch_first=True)\n"
        "    def forward(self, x):\n"
        "        out, (h, c) = self.lstm(x)\n"
        "        return out[:, -1, :]\n\n"
        "def get_inputs():\n    return [torch.rand(4, 100, 32)]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    w = count_problem(problem)
    tokens, i, h = 4 * 100, 32, 64
    assert w.flops_tensor == 2 * tokens * (4 * h * i + 4 * h * h) + 2 * tokens * (4 * h * h + 4 * h * h)
    assert w.kernel_count >= 200  # one launch per timestep and layer at least


def test_problem_object_with_path_is_accepted():
    w = count_problem(ProblemValue(name="gemm_obj", path=str(DATA / "gemm.py")))  # its module imported from the path
    assert w.name == "gemm_obj" and w.flops == 2 * 1024 * 512 * 2048


def test_broken_import_gives_one_line_naming_file_and_line():
    with pytest.raises(ProblemLoadError) as info:
        count_problem(DATA / "broken_import.py")
    msg = str(info.value)
    assert "\n" not in msg
    assert "broken_import.py:13" in msg and "import failed" in msg and "broken on purpose" in msg


def test_broken_forward_gives_one_line():
    with pytest.raises(ProblemLoadError) as info:
        count_problem(DATA / "broken_forward.py")
    msg = str(info.value)
    assert "\n" not in msg and "broken_forward.py:10" in msg and "cannot be multiplied" in msg


@pytest.mark.parametrize("forward", ["self.fc(x)", "x @ self.fc.weight.T", "torch.bmm(x[None], self.fc.weight.T[None])"])
def test_a_forward_that_fails_on_its_own_inputs_is_refused(tmp_path, forward):
    """int64 inputs to a float nn.Linear: meta tensors multiply them, real kernels (and so the judge) refuse to."""
    problem = tmp_path / "int64_linear.py"
    problem.write_text("import torch\nclass Model(torch.nn.Module):\n    def __init__(self):\n        super().__init__()\n"
                       f"        self.fc = torch.nn.Linear(32, 64)\n    def forward(self, x):\n        return {forward}\n"
                       "def get_inputs():\n    return [torch.randint(0, 5, (16, 32))]\n"
                       "def get_init_inputs():\n    return []\n")
    with pytest.raises(ProblemLoadError, match="fails on its own inputs.*int64 by float32") as info:
        count_problem(problem)
    assert "\n" not in str(info.value) and "int64_linear.py" in str(info.value)
    problem.write_text(problem.read_text().replace("torch.randint(0, 5, (16, 32))", "torch.rand(16, 32)"))
    assert count_problem(problem).flops > 0  # float inputs: the same forward counts


def test_missing_file_and_missing_functions(tmp_path):
    with pytest.raises(ProblemLoadError, match="no such problem file"):
        count_problem(tmp_path / "nope.py")
    bare = tmp_path / "bare.py"
    bare.write_text("x = 1\n")
    with pytest.raises(ProblemLoadError, match="missing Model, get_inputs, get_init_inputs"):
        count_problem(bare)


def test_syntax_error_is_a_clear_message(tmp_path):
    bad = tmp_path / "syntax.py"
    bad.write_text("def broken(:\n")
    with pytest.raises(ProblemLoadError, match="syntax.py.*SyntaxError"):
        count_problem(bad)


BUILTIN = sorted((ROOT / "evals" / "suites").glob("*/*.py"))


@pytest.mark.skipif(not BUILTIN, reason="the built-in suite is not present")
@pytest.mark.parametrize("path", BUILTIN, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_builtin_problem_counts(path):
    w = count_problem(path)
    assert w.flops > 0 and w.bytes_fused > 0
    assert w.bytes_unfused >= w.bytes_fused * 0.999
    assert math.isfinite(w.flops)


def _write(tmp_path, name, forward, inputs, imports=""):
    path = tmp_path / name
    path.write_text(
        f"import torch\nimport torch.nn as nn\n{imports}\n\n"
        "class Model(nn.Module):\n"
        "    def forward(self, x):\n"
        f"        {forward}\n\n"
        f"def get_inputs():\n    return [{inputs}]\n\n"
        "def get_init_inputs():\n    return []\n"
    )
    return path


def test_distribution_sampled_inputs_count_on_meta(tmp_path):
    # KernelBench's hinge loss samples a Pareto distribution, whose argument checks call .item()
    path = _write(tmp_path, "hinge.py", "return torch.mean(torch.clamp(1 - x, min=0))",
                  "Pareto(0.01, 1.5).sample((8192, 8192))", imports="from torch.distributions import Pareto")
    w = count_problem(path)
    assert w.bytes_fused == 4 * 8192 * 8192 + 4
    assert not w.notes


def test_data_dependent_forward_falls_back_to_cpu_when_small(tmp_path):
    path = _write(tmp_path, "item.py", "return x * float(x.max().item() > 2)", "torch.rand(64, 64)")
    w = count_problem(path)
    assert any("CPU tensors" in n for n in w.notes)
    assert w.flops == 64 * 64 * 2  # max, then the multiply


def test_data_dependent_forward_too_large_for_cpu_is_a_clear_error(tmp_path):
    path = _write(tmp_path, "item_big.py", "return x * float(x.max().item() > 2)", "torch.rand(32768, 32768)")
    start = time.perf_counter()
    with pytest.raises(ProblemLoadError, match="too large to count on the CPU") as info:
        count_problem(path)
    assert "item_big.py:7" in str(info.value)  # the line of the forward that failed
    assert time.perf_counter() - start < 30  # nothing allocated


def test_pooling_counts_its_window(tmp_path):
    path = _write(tmp_path, "pool.py", "return self.pool(x)", "torch.rand(4, 8, 32, 32)")
    path.write_text(path.read_text().replace(
        "class Model(nn.Module):\n", "class Model(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n        self.pool = nn.MaxPool2d(3, stride=2, padding=1)\n\n"))
    w = count_problem(path)
    assert w.flops == 4 * 8 * 16 * 16 * 9
    assert {r.kind for r in w.ops} == {"pool"}


def test_epilogue_refs_are_tensor_reads_not_lets():
    from dsl_compiler import ir
    from dsl_compiler.parser import parse
    from dsl_compiler.walk import epilogue_nodes, epilogue_refs

    program, diags = parse("""program p
input x: f32[64, 32]
input r: f32[64, 16]
param w: f32[16, 32] = "fc.weight"
param b: f32[16] = "fc.bias"
kernel fc = gemm(x, w^T) {
  math = tf32
  let h = relu(acc + b[col])
  store y: f32 = h * h + r
}
output y
""")
    assert program is not None, diags
    (kernel,) = program.kernels
    assert sorted((ref.name, ref.index) for ref in epilogue_refs(kernel)) == [("b", "col"), ("r", "full")]
    kinds = [type(node).__name__ for node in epilogue_nodes(kernel)]
    assert kinds.count("Ref") == 4 and kinds.count("Acc") == 1  # b, h twice, r; one acc in the let
    assert all(isinstance(node, (ir.Acc, ir.Ref, ir.Unary, ir.Binary)) for node in epilogue_nodes(kernel))


def test_a_warm_up_past_its_time_limit_on_a_loaded_machine_fails_nothing(monkeypatch):
    """The warm-up is ours, not the user's problem: on a loaded machine it may pass its time limit, and the command
    goes on (it printed a traceback for `optimize` and `eval` before)."""
    from sol_models import counting

    def slow(problem, seed=0):
        raise counting.ProblemLoadError("warm-up: building and running Model did not return within 4 s")

    monkeypatch.setattr(counting, "_warm", [])
    monkeypatch.setattr(counting, "count_problem", slow)
    counting.warm_up()
    assert counting._warm == []  # not warmed: the next count pays the cost instead
