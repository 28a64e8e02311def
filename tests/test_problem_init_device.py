"""A Model whose __init__ cannot run with the device as the default (a CPU torch.Generator handed to a
factory function, as hand-written problem files do) is built on the CPU and moved, and the problem says so
(``init_on_cpu``) so that candidates are built the same way and one seed gives one set of parameters."""
import textwrap

import torch

from evals.problems import load_problem

SOURCE = textwrap.dedent('''
    import torch
    import torch.nn as nn

    class Model(nn.Module):
        def __init__(self, n):
            super().__init__()
            g = torch.Generator().manual_seed(7)
            if torch.empty(0).device.type != "cpu":  # what torch.randn(generator=g) raises under CUDA
                raise RuntimeError("Expected a 'cuda' device type for generator but found 'cpu'")
            self.w = nn.Parameter(torch.randn(n, n, generator=g))

        def forward(self, x):
            return x @ self.w

    def get_inputs():
        return [torch.randn(4, 8)]

    def get_init_inputs():
        return [8]
''')


def test_a_model_that_needs_the_cpu_is_built_there_and_moved(tmp_path):
    path = tmp_path / "cpu_generator.py"
    path.write_text(SOURCE)
    problem = load_problem(path)
    assert not problem.init_on_cpu
    model = problem.make_model(seed=1, device="meta")  # like CUDA: a device the CPU generator does not match
    assert problem.init_on_cpu
    assert model.w.device.type == "meta"
    # from then on built on the CPU first, without trying the device again; the values are the CPU's
    again = problem.make_model(seed=1, device=None)
    expected = torch.randn(8, 8, generator=torch.Generator().manual_seed(7))
    assert torch.equal(again.w.detach(), expected)


def test_a_model_that_builds_on_the_device_stays_there(tmp_path):
    path = tmp_path / "plain.py"
    path.write_text(SOURCE.replace("!= \"cpu\"", "== \"no such device\""))
    problem = load_problem(path)
    model = problem.make_model(seed=1, device="meta")
    assert model.w.device.type == "meta" and not problem.init_on_cpu
