"""nn.LSTM, nn.GRU and nn.RNN are unrolled at tracing into the ops they compute (frontend.recurrent): per layer and
direction one input-projection GEMM, per step one GEMM per gate with its activation fused; the program on the
interpreter gives every output of the module (sequence, h_n, c_n) in fp32. proj_size and dropout between layers in
training mode stay one module step, saying why."""

from __future__ import annotations

import itertools
import types

import pytest
import torch
import torch.nn as nn

from dsl_compiler import interpreter, runtime
from dsl_compiler.frontend import trace_problem
from run_vocabulary.problem import ProblemValue
from sol_models.counting import count_problem
from sol_models.trace import coverage_of

INPUT, HIDDEN = 6, 8


class Recurrent(nn.Module):
    """One recurrent module, no initial state; returns all of its outputs flat (sequence, h_n[, c_n])."""

    def __init__(self, cls, hidden=HIDDEN, **options):
        super().__init__()
        self.rnn = cls(INPUT, hidden, **options)

    def forward(self, x):
        if isinstance(self.rnn, nn.LSTM):
            out, (h, c) = self.rnn(x)
            return out, h, c
        out, h = self.rnn(x)
        return out, h


class RecurrentFromState(Recurrent):
    """The same, from an initial state h0 (an LSTM's (h0, c0))."""

    def forward(self, x, h0, c0=None):
        if isinstance(self.rnn, nn.LSTM):
            out, (h, c) = self.rnn(x, (h0, c0))
            return out, h, c
        out, h = self.rnn(x, h0)
        return out, h


class GRUFromState(RecurrentFromState):
    def forward(self, x, h0):  # no c0 argument: every forward() argument is a tensor of the problem
        return super().forward(x, h0)


def recurrent(cls, state, **options):
    """A model of ``cls`` with these options, taking an initial state when ``state``."""
    if not state:
        return Recurrent(cls, **options)
    return RecurrentFromState(cls, **options) if cls is nn.LSTM else GRUFromState(cls, **options)


def problem(make_model, inputs, name="recurrent"):
    module = types.SimpleNamespace(__name__=name, Model=make_model, get_inputs=lambda: [t.clone() for t in inputs],
                                   get_init_inputs=lambda: [])
    # f32 only: the kernels compute in f32 (tf32x3), so the program matches the module to 1e-4
    return ProblemValue(name=name, path="", module=module, allowed_precisions=("f32",))


def traced_and_checked(make_model, inputs, name="recurrent"):
    """The trace of the model, its program run on the interpreter and compared with the model, output by output."""
    result = trace_problem(problem(make_model, inputs, name))
    assert result.program is not None, result.diagnostics
    torch.manual_seed(0)
    model = make_model()
    ours = interpreter.run(result.program, list(inputs), runtime.bind_params(result.program, model),
                           runtime.bind_modules(result.program, model))
    with torch.no_grad():
        theirs = model(*inputs)
    theirs = theirs if isinstance(theirs, tuple) else (theirs,)
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b, atol=1e-4, rtol=1e-4)
    return result


def inputs_for(cls, batch_first, layers, bidirectional, state, steps=4, batch=3):
    torch.manual_seed(1)
    x = torch.randn(batch, steps, INPUT) if batch_first else torch.randn(steps, batch, INPUT)
    states = layers * (2 if bidirectional else 1)
    if not state:
        return [x]
    h0 = torch.randn(states, batch, HIDDEN)
    return [x, h0, torch.randn(states, batch, HIDDEN)] if cls is nn.LSTM else [x, h0]


def module_steps(result):
    return [s for s in result.program.torch_steps if s.fn == "module"]


CASES = [(cls, kw) for cls, kw in ((nn.LSTM, {}), (nn.GRU, {}), (nn.RNN, {}), (nn.RNN, {"nonlinearity": "relu"}))]


@pytest.mark.parametrize("cls, extra", CASES, ids=["lstm", "gru", "rnn_tanh", "rnn_relu"])
@pytest.mark.parametrize("batch_first, layers, bidirectional, bias, state", [
    (False, 1, False, True, False), (True, 1, False, True, True), (False, 2, False, False, True),
    (True, 2, True, True, False), (False, 1, True, False, False), (True, 3, True, True, True),
])
def test_the_unrolled_module_gives_every_output_of_the_module(cls, extra, batch_first, layers, bidirectional, bias,
                                                               state):
    inputs = inputs_for(cls, batch_first, layers, bidirectional, state)

    def make_model():
        return recurrent(cls, state, batch_first=batch_first, num_layers=layers, bidirectional=bidirectional,
                         bias=bias, **extra)

    result = traced_and_checked(make_model, inputs)
    assert module_steps(result) == []
    gates = {nn.LSTM: 4, nn.GRU: 3, nn.RNN: 1}[cls]
    runs = layers * (2 if bidirectional else 1)
    steps = inputs[0].shape[1 if batch_first else 0]
    # the input projection once per layer and direction; a GEMM per gate and step, but the first without h0
    recurrent_steps = steps if state else steps - 1
    assert len(result.program.kernels) == runs * (1 + gates * recurrent_steps)


@pytest.mark.parametrize("shape", [(1, 1, 1), (7, 2, 5)])
def test_odd_shapes_one_step_one_sample_and_a_longer_sequence(shape):
    steps, batch, hidden = shape

    def make_model():
        return Recurrent(nn.GRU, hidden, num_layers=2, bidirectional=True)

    traced_and_checked(make_model, [torch.randn(steps, batch, INPUT)])


class LSTMClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        out, _ = self.lstm(x)
        return self.fc(out[:, -1])


class GRUClassifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.gru = nn.GRU(32, 64, batch_first=True)
        self.fc = nn.Linear(64, 10)

    def forward(self, x):
        _, h = self.gru(x)
        return self.fc(h[-1])


@pytest.mark.parametrize("model_cls", [LSTMClassifier, GRUClassifier])
def test_a_plain_recurrent_model_runs_in_kernels(model_cls):
    inputs = [torch.randn(4, 12, 32)]
    result = traced_and_checked(model_cls, inputs, name=model_cls.__name__)
    counts = count_problem(problem(model_cls, inputs, model_cls.__name__))
    coverage, _ = coverage_of(result.program, counts.flops)
    assert coverage >= 0.8, coverage
    steps = [r for r in result.coverage if r.placement == "torch_step"]
    assert all("activation" not in r.reason for r in steps)


def test_an_lstm_with_projections_stays_a_module_step_saying_why():
    def make_model():
        return Recurrent(nn.LSTM, proj_size=4)

    result = traced_and_checked(make_model, [torch.randn(5, 2, INPUT)])
    (step,) = module_steps(result)
    assert dict((k.key, k.value) for k in step.kwargs)["path"] == "rnn"
    row = next(r for r in result.coverage if r.op == "rnn")
    assert row.placement == "torch_step" and "proj_size" in row.reason


def test_dropout_between_layers_in_training_mode_stays_a_module_step():
    def make_model():
        model = Recurrent(nn.GRU, num_layers=2, dropout=0.5)
        return model.eval() if evaluating else model

    evaluating = False
    result = trace_problem(problem(make_model, [torch.randn(5, 2, INPUT)]))
    row = next(r for r in result.coverage if r.op == "rnn")
    assert row.placement == "torch_step" and "dropout" in row.reason
    evaluating = True  # in eval mode dropout is the identity: unrolled
    result = traced_and_checked(make_model, [torch.randn(5, 2, INPUT)])
    assert module_steps(result) == []


def test_the_hidden_state_tuple_may_be_passed_whole_and_read_by_index():
    class LastState(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = nn.LSTM(INPUT, HIDDEN, num_layers=2)

        def forward(self, x, h0, c0):
            hx = (h0, c0)
            result = self.lstm(x, hx)
            return result[1][0] + result[1][1], result[0]

    inputs = inputs_for(nn.LSTM, False, 2, False, True)
    traced_and_checked(LastState, inputs)


@pytest.mark.parametrize("options", list(itertools.product([False, True], [False, True])))
def test_an_rnn_cell_of_one_gate_fuses_its_whole_step(options):
    batch_first, state = options

    def make_model():
        return recurrent(nn.RNN, state, batch_first=batch_first)

    inputs = inputs_for(nn.RNN, batch_first, 1, False, state)
    result = traced_and_checked(make_model, inputs)
    # tanh(h W_hh^T + x_t W_ih^T + b) is one kernel's epilogue: no element-wise step but the first step's tanh
    # without h0, even where the kernels compute in f32 (an epilogue then reads one tensor)
    fns = [s.fn for s in result.program.torch_steps]
    assert fns.count("tanh") == (0 if state else 1)
    assert fns.count("add") == 1  # b_ih + b_hh, once: the projection's bias


def test_a_second_lstm_starts_from_the_first_ones_final_state():
    class Stacked(nn.Module):
        def __init__(self):
            super().__init__()
            self.first = nn.LSTM(INPUT, HIDDEN, batch_first=True)
            self.second = nn.LSTM(HIDDEN, HIDDEN, batch_first=True)

        def forward(self, x):
            out, state = self.first(x)
            out, (h, c) = self.second(out, state)
            return out, h, c

    result = traced_and_checked(Stacked, [torch.randn(2, 5, INPUT)])
    assert module_steps(result) == []


def test_an_unbatched_input_stays_a_module_step_saying_why():
    result = traced_and_checked(lambda: Recurrent(nn.GRU), [torch.randn(5, INPUT)])
    (step,) = module_steps(result)
    row = next(r for r in result.coverage if r.op == "rnn")
    assert "unbatched" in row.reason


def test_a_sequence_too_long_to_unroll_stays_one_module_step_with_its_reason():
    from dsl_compiler.frontend import recurrent as rec

    steps = rec.MAX_UNROLLED_GEMMS // 4 + 1  # one LSTM layer: four recurrent GEMMs a step

    def make_model():
        return Recurrent(nn.LSTM, batch_first=True)

    result = traced_and_checked(make_model, [torch.randn(2, steps, INPUT)])
    (step,) = module_steps(result)
    row = next(r for r in result.coverage if r.op == "rnn")
    assert row.placement == "torch_step" and f"{4 * steps} recurrent GEMMs" in row.reason


class StateAttributeLSTM(nn.Module):
    """KernelBench Level 3's LSTMs: the initial state is a plain tensor attribute drawn in __init__ (outside
    state_dict), moved to the input's device in forward."""

    def __init__(self, move):
        super().__init__()
        self.lstm = nn.LSTM(INPUT, HIDDEN, batch_first=True)
        self.fc = nn.Linear(HIDDEN, 4)
        self.h0, self.c0 = torch.randn(1, 3, HIDDEN), torch.randn(1, 3, HIDDEN)
        self.move = move

    def forward(self, x):
        h0, c0 = (self.h0.to(x.device), self.c0.to(x.device)) if self.move else (self.h0, self.c0)
        out, _ = self.lstm(x, (h0, c0))
        return self.fc(out[:, -1, :])


@pytest.mark.parametrize("move", [False, True], ids=["as_is", "moved_to_the_input_device"])
def test_an_initial_state_held_as_a_plain_attribute_is_a_param_of_the_program(move):
    torch.manual_seed(4)
    result = traced_and_checked(lambda: StateAttributeLSTM(move), [torch.randn(3, 5, INPUT)], name="state_attr")
    assert module_steps(result) == []
    assert {d.source for d in result.program.params} >= {"h0", "c0"}
