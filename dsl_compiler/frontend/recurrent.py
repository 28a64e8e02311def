"""Recurrent layers (``nn.LSTM``, ``nn.GRU``, ``nn.RNN``) rewritten in the traced graph as the elementary ops they
compute, unrolled over the sequence length the traced shapes give, so the lowering makes kernels of them: per layer
and direction one GEMM of every step's input projection, then per step one GEMM per gate of h_{t-1} with that
gate's rows of W_hh, whose epilogue adds the step's slice of the projection and applies the gate's math. A gate is
a GEMM of its own (not a column chunk of one 4H GEMM) because an epilogue cannot split its columns into gates.

A call the rewrite does not take (``proj_size``, dropout between layers in training mode, an unbatched or packed
input, keywords it does not know) stays one ``module`` step; ``kept_whole`` says why."""

from __future__ import annotations

from typing import Any, Callable

from dsl_compiler.frontend.module_rewrites import Rule

# gates per layer, in the order PyTorch stacks their rows in weight_ih / weight_hh
GATES = {"LSTM": 4, "GRU": 3, "RNN": 1}
# recurrent GEMMs an unrolled call may make (layers x directions x steps x gates): past it the call stays one
# module step. KernelBench's 6-layer LSTMs over 512 steps would be 12,288 launch-bound GEMMs of a few
# microseconds each, a program no model can read and slower than the library's fused cell
MAX_UNROLLED_GEMMS = 1024


def kept_whole(module: Any, node: Any) -> str | None:
    """Why a call of recurrent ``module`` at ``node`` stays one module step; None when it is rewritten."""
    import torch.fx

    if getattr(module, "proj_size", 0):
        return "proj_size > 0 (an LSTM with projections) is not rewritten"
    if module.dropout > 0 and module.training and module.num_layers > 1:
        return "dropout between layers in training mode draws random masks a program cannot reproduce"
    if set(node.kwargs) - {"hx"} or len(node.args) > 2:
        return "a call with arguments other than (input, hx)"
    x = node.args[0] if node.args else None
    meta = x.meta.get("tensor_meta") if isinstance(x, torch.fx.Node) else None
    if not hasattr(meta, "shape"):
        return "its input is not one tensor (a PackedSequence)"
    if len(meta.shape) != 3:
        return "an unbatched (2-D) input"
    steps = int(meta.shape[1 if module.batch_first else 0])
    gemms = module.num_layers * (2 if module.bidirectional else 1) * steps * GATES[recurrent_kind(module) or "LSTM"]
    if gemms > MAX_UNROLLED_GEMMS:
        return (f"unrolled it would be {gemms} recurrent GEMMs ({steps} steps; at most {MAX_UNROLLED_GEMMS}): "
                f"launch-bound steps the library's fused cell runs faster")
    return None


def unroll(kind: str, module: Any, x: Any, hx: Any, sequence_length: int, param: Callable[[str], Any]) -> tuple:
    """What ``module(x, hx)`` returns, as elementary torch ops on ``x`` (tensors or fx proxies): ``(output, h_n)``,
    for an LSTM ``(output, (h_n, c_n))``. ``hx`` is None (zeros), h0, or an LSTM's (h0, c0), each
    [num_layers * directions, batch, hidden]; ``param(name)`` gives the module's tensor of that name."""
    import torch
    import torch.nn.functional as F

    hidden = module.hidden_size
    gates = GATES[kind]
    directions = 2 if module.bidirectional else 1
    time_dim = 1 if module.batch_first else 0
    h0, c0 = (hx if kind == "LSTM" and hx is not None else (hx, None))
    layer_input = x
    h_n, c_n = [], []
    for layer in range(module.num_layers):
        sequences = []
        for direction in range(directions):
            suffix = f"_l{layer}" + ("_reverse" if direction else "")
            state = layer * directions + direction
            w_hh = param(f"weight_hh{suffix}")
            w_gate = [w_hh[k * hidden:(k + 1) * hidden] for k in range(gates)] if gates > 1 else [w_hh]
            b_gate: list[Any] = [None] * gates
            projection_bias = None
            if module.bias:
                # b_hh joins b_ih in the projection's epilogue, once per layer: a step's epilogue then reads one
                # tensor (its slice of the projection), which every kernel math allows; a GRU's b_hn stays
                # inside r * (W_hn h + b_hn)
                b_ih, b_hh = param(f"bias_ih{suffix}"), param(f"bias_hh{suffix}")
                if kind == "GRU":
                    rz = slice(0, 2 * hidden)
                    projection_bias = torch.cat([b_ih[rz] + b_hh[rz], b_ih[2 * hidden:]])
                    b_gate[2] = b_hh[2 * hidden:]
                else:
                    projection_bias = b_ih + b_hh
            projection = F.linear(layer_input, param(f"weight_ih{suffix}"), projection_bias)  # every step at once
            h = h0[state] if h0 is not None else None
            c = c0[state] if c0 is not None else None
            outputs: list[Any] = [None] * sequence_length
            steps = range(sequence_length - 1, -1, -1) if direction else range(sequence_length)
            for t in steps:
                def projected(k, t=t):
                    cols = slice(k * hidden, (k + 1) * hidden) if gates > 1 else slice(None)
                    return projection[:, t, cols] if time_dim else projection[t, :, cols]

                def recurrent(k):
                    return F.linear(h, w_gate[k], b_gate[k])

                def preactivation(k):
                    # h_{t-1} = 0 (no initial state, first step): no recurrent GEMM
                    return recurrent(k) + projected(k) if h is not None else projected(k)

                if kind == "LSTM":
                    # each gate's activation fuses into its GEMM; an op combining two gates' kernels is a PyTorch
                    # step, and the grouping fuses the rest of the cell update where one operand is such a step
                    i, f, o = (torch.sigmoid(preactivation(k)) for k in (0, 1, 3))
                    g = torch.tanh(preactivation(2))
                    c = g * i + f * c if c is not None else g * i
                    h = torch.tanh(c) * o
                elif kind == "GRU":
                    r, z = (torch.sigmoid(preactivation(k)) for k in (0, 1))
                    if h is not None:
                        n = torch.tanh(recurrent(2) * r + projected(2))
                        h = n + (h - n) * z  # (1 - z) * n + z * h
                    else:
                        n = torch.tanh(b_gate[2] * r + projected(2) if b_gate[2] is not None else projected(2))
                        h = n - n * z
                else:
                    h = torch.relu(preactivation(0)) if module.nonlinearity == "relu" else torch.tanh(preactivation(0))
                outputs[t] = h
            h_n.append(h)
            c_n.append(c)
            sequences.append(torch.stack(outputs, dim=time_dim))
        layer_input = sequences[0] if directions == 1 else torch.cat(sequences, dim=2)
    h_n_stacked = torch.stack(h_n, dim=0)
    if kind == "LSTM":
        return layer_input, (h_n_stacked, torch.stack(c_n, dim=0))
    return layer_input, h_n_stacked


def recurrent_kind(module: Any) -> str | None:
    """"LSTM", "GRU" or "RNN" for a module of that class, else None: a subclass too, unless it has a forward() of
    its own (what it computes is then not the class's)."""
    import torch.nn as nn

    for kind, cls in (("LSTM", nn.LSTM), ("GRU", nn.GRU), ("RNN", nn.RNN)):
        if isinstance(module, cls) and type(module).forward is cls.forward:
            return kind
    return None


def _build(call: Any) -> tuple:
    import operator

    import torch.fx

    module, node = call.module, call.node
    kind = recurrent_kind(module)
    x = node.args[0]
    hx = node.args[1] if len(node.args) > 1 else node.kwargs.get("hx")
    sequence_length = int(x.meta["tensor_meta"].shape[1 if module.batch_first else 0])
    if isinstance(hx, (tuple, list)):
        hx_value: Any = tuple(call.proxy(a) for a in hx)
    elif isinstance(hx, torch.fx.Node) and kind == "LSTM":
        hx_value = (call.proxy(call.graph.call_function(operator.getitem, (hx, 0))),
                    call.proxy(call.graph.call_function(operator.getitem, (hx, 1))))
    else:
        hx_value = call.proxy(hx)
    return unroll(kind, module, call.proxy(x), hx_value, sequence_length, call.param)


def _classes() -> tuple:
    import torch.nn as nn

    return (nn.LSTM, nn.GRU, nn.RNN)


RULE = Rule("recurrent", _classes, kept_whole, _build)
