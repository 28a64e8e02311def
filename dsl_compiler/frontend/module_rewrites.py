"""Library modules whose calls the trace rewrites, in place, as the elementary ops they compute, so the lowering
makes kernels of them (torch.fx keeps every ``torch.nn`` module as one call). A rule names the modules it takes,
why a call stays whole (one ``module`` step, with that reason), and what the call computes, built with fx proxies.
A rewrite may call the module's children (a Transformer layer calls its attention and its Linears): those calls
are taken in the next round, once the caller has propagated shapes again. The rules themselves are in
``frontend.library_modules``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable


@dataclass(frozen=True)
class Call:
    """One module call being rewritten: its module and fx node, its arguments as proxies (``arg(i, name,
    default)``), the module's tensors (``param``), its children's calls (``child``) and plain functions
    (``function``), all inserted before the node."""

    module: Any
    node: Any
    graph: Any
    proxy: Callable[[Any], Any]
    param: Callable[[str], Any]

    def arg(self, index: int, name: str, default: Any = None) -> Any:
        """Argument ``index`` (or keyword ``name``) of the call, as the module's forward() names it."""
        if len(self.node.args) > index:
            return self.proxy(self.node.args[index])
        return self.proxy(self.node.kwargs.get(name, default))

    def child(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """A call of the module's child ``name`` (a Linear, a LayerNorm, an attention) on proxies."""
        import torch.fx

        unwrap = (lambda a: a.node if isinstance(a, torch.fx.Proxy) else a)
        node = self.graph.call_module(f"{self.node.target}.{name}", tuple(unwrap(a) for a in args),
                                      {k: unwrap(v) for k, v in kwargs.items()})
        return self.proxy(node)

    def shape(self, value: Any) -> tuple[int, ...] | None:
        """The traced shape of an argument (a proxy of a node whose shape was propagated), else None."""
        import torch.fx

        node = value.node if isinstance(value, torch.fx.Proxy) else value
        meta = node.meta.get("tensor_meta") if isinstance(node, torch.fx.Node) else None
        return tuple(int(s) for s in meta.shape) if hasattr(meta, "shape") else None


@dataclass(frozen=True)
class Rule:
    """Modules of ``classes`` (a subclass only where it keeps the class's forward()) rewritten by ``build``
    unless ``kept_whole`` gives a reason."""

    name: str
    classes: Callable[[], tuple[type, ...]]
    kept_whole: Callable[[Any, Any], str | None]
    build: Callable[[Call], Any]

    def takes(self, module: Any) -> bool:
        return any(isinstance(module, cls) and type(module).forward is cls.forward for cls in self.classes())


def rule_for(module: Any, rules: tuple[Rule, ...]) -> Rule | None:
    """The rule of ``rules`` that takes ``module``'s calls, or None."""
    return next((r for r in rules if r.takes(module)), None)


def rewrite_modules(gm: Any, rules: tuple[Rule, ...]) -> int:
    """Replace each call of a module one of ``rules`` takes (shapes propagated) by the ops it computes, in place;
    returns how many calls were rewritten. A call reading what this round made waits for the next one."""
    import torch.fx

    rewritten = 0
    graph = gm.graph
    shaped = set(graph.nodes)
    for node in list(graph.nodes):
        if node.op != "call_module" or any(a not in shaped for a in node.all_input_nodes):
            continue
        module = gm.get_submodule(node.target)
        rule = rule_for(module, rules)
        if rule is None or rule.kept_whole(module, node) is not None:
            continue
        tracer = torch.fx.proxy.GraphAppendingTracer(graph)

        def proxy(a, tracer=tracer):
            return torch.fx.Proxy(a, tracer) if isinstance(a, torch.fx.Node) else a

        before = set(graph.nodes)
        with graph.inserting_before(node):
            attrs: dict[str, Any] = {}

            def param(name, path=str(node.target), attrs=attrs, proxy=proxy):
                if name not in attrs:
                    attrs[name] = proxy(graph.get_attr(f"{path}.{name}"))
                return attrs[name]

            result = rule.build(Call(module, node, graph, proxy, param))
        _replace_uses(node, _nodes_of(result))
        graph.erase_node(node)
        # what the rewrite built that nothing reads (attention weights no one asked for), last first
        for made in reversed([n for n in graph.nodes if n not in before]):
            if not made.users and made.op in ("call_function", "call_method", "call_module", "get_attr"):
                graph.erase_node(made)
        rewritten += 1
    if rewritten:
        graph.lint()
        gm.recompile()
    return rewritten


def users_beyond_first(node: Any) -> bool:
    """Whether anything reads more of ``node``'s tuple than its element 0 (a ``y, _ = attention(...)`` does not)."""
    import operator

    return any(not (u.op == "call_function" and u.target is operator.getitem and u.args[1] == 0)
               for u in node.users)


def _nodes_of(value: Any) -> Any:
    import torch.fx

    if isinstance(value, torch.fx.Proxy):
        return value.node
    if value is None:
        return None
    return tuple(_nodes_of(v) for v in value)


def _replace_uses(node: Any, value: Any) -> None:
    """Every use of ``node`` reads ``value`` instead (a node, None, or a nested tuple of them): a constant-index
    getitem of a tuple is replaced by the element it picks."""
    import operator

    import torch.fx

    for user in list(node.users):
        if (user.op == "call_function" and user.target is operator.getitem and user.args[0] is node
                and isinstance(user.args[1], int) and isinstance(value, tuple)):
            _replace_uses(user, value[user.args[1]])
            user.graph.erase_node(user)
        else:
            user.args = torch.fx.node.map_arg(user.args, lambda a: value if a is node else a)
            user.kwargs = torch.fx.node.map_arg(user.kwargs, lambda a: value if a is node else a)
