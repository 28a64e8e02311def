"""The name of what a traced call calls, one spelling whatever the tracer (torch.fx's functions and methods, or
torch.export's aten overloads)."""

from __future__ import annotations


def target_name(node) -> tuple[str, str]:
    """(canonical op name, readable target) of a call_function / call_method node."""
    t = node.target
    if node.op == "call_method":
        name = t
        readable = f"Tensor.{t}"
    else:
        name = getattr(t, "__name__", str(t))
        overload = getattr(t, "overloadpacket", None)
        if overload is not None:  # aten op from torch.export
            name = overload.__name__
        mod = getattr(t, "__module__", "") or ""
        prefix = "F" if mod.startswith("torch.nn.functional") else ("operator" if mod == "_operator" else "torch")
        readable = f"{prefix}.{name}"
        if name == "getattr":
            name = str(node.args[1])
            readable = f"Tensor.{name}"
    name = name.lstrip("_")
    if name.endswith("_"):
        name = name.rstrip("_")  # in-place variants compute the same values here
    return name, readable
