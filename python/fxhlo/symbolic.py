"""Symbolic-shape graphs traced once, bound to each call's sizes (issue 37, item 2 in part).

With ``dynamic=True`` or Dynamo's automatic dynamic shapes, the backend receives a graph whose
sizes are symbols (``s0``). For inference, aot_autograd traces and decomposes it once, with
the symbols (as Inductor does); the ATen graph it gives keeps them in its ``meta['val']``
types and as SymInt-valued nodes (``sym_size``, ``s0 * 768``). A call binds each symbol
to the size it has in that call's inputs, and the graph is *specialized* to those sizes by
substitution: no tracing, no decomposition, only the types rewritten and the size
arithmetic evaluated. The static graph is then compiled by fxhlo like any other (each new
size costs one fxhlo compile, milliseconds on transformer-block graphs; a size seen before
costs a dictionary lookup). Retracing per size (the fallback, ``ShapeSpecializer``) costs
hundreds of milliseconds to seconds per size.

What is still missing for issue 37: one fxhlo program for every size (symbolic sizes in the
IR, kernels and memory plan), training graphs (their forward saves sizes for the backward;
they go through the per-size fallback), and StableHLO with dynamic dimensions.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Tuple

import torch

__all__ = ["Binder", "Sizes", "SymbolicError", "bind_symbols", "check_guards", "specialize"]


class SymbolicError(Exception):
    """A symbolic graph cannot be bound to a call's sizes or specialized to them."""


def _expr(v: Any):
    """The sympy expression of a SymInt/SymFloat/SymBool (None for a plain number)."""
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return v.node.expr
    return None


class Sizes:
    """Symbols bound to sizes, and what evaluating expressions under them gave (one
    specialization evaluates the same few sizes thousands of times)."""

    def __init__(self, metas: Optional[Dict[Tuple, torch.Tensor]] = None) -> None:
        self.binding: Dict[Any, int] = {}
        self._memo: Dict[Any, Any] = {}
        # meta tensors by type, shared by a graph's specializations (making one is slow)
        self._metas: Dict[Tuple, torch.Tensor] = {} if metas is None else metas

    def __str__(self) -> str:
        return ", ".join(f"{k}={v}" for k, v in sorted(self.binding.items(),
                                                         key=lambda kv: str(kv[0])))

    def bind(self, v: Any, actual: int, where: str) -> None:
        """Records ``symbol = actual`` where ``v`` is a bare symbol; checks a number."""
        import sympy
        e = _expr(v)
        if e is None:
            if int(v) != int(actual):
                raise SymbolicError(f"{where}: {actual} where the graph has {v}")
            return
        if isinstance(e, sympy.Symbol):
            prev = self.binding.setdefault(e, int(actual))
            if prev != int(actual):
                raise SymbolicError(f"{where}: {e} is {prev} and {actual} in one call")

    def bound(self, v: Any) -> bool:
        e = _expr(v)
        return e is None or self.bound_expr(e)

    def bound_expr(self, e: Any) -> bool:
        return e.free_symbols <= self.binding.keys()

    def number(self, v: Any) -> Any:
        """``v`` (a SymInt/SymFloat/SymBool or a number) evaluated."""
        if not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return v
        # keyed by the node's raw expression: ``.expr`` simplifies it (slow) on every read
        key = (getattr(v.node, "_expr", None), type(v))
        if key[0] is not None and key in self._memo:
            return self._memo[key]
        e = v.node.expr
        missing = e.free_symbols - self.binding.keys()
        if missing:
            raise SymbolicError(f"{v} has symbols no input binds: "
                                f"{', '.join(sorted(map(str, missing)))}")
        import sympy
        r = sympy.sympify(e.xreplace(self.binding))
        if isinstance(v, torch.SymBool):
            r = bool(r)
        elif isinstance(v, torch.SymFloat):
            r = float(r)
        elif not r.is_Integer:
            raise SymbolicError(f"{v} is {r} under {self}, not an integer")
        else:
            r = int(r)
        self._memo[key] = r
        return r

    def value(self, val: Any) -> Any:
        """A ``meta['val']`` with every size evaluated: tensors become meta tensors of the
        concrete shape, strides and dtype; numbers and containers follow."""
        if isinstance(val, torch.Tensor):
            shape = tuple(self.number(s) for s in val.shape)
            stride = tuple(self.number(s) for s in val.stride())
            key = (shape, stride, val.dtype, val.requires_grad)
            t = self._metas.get(key)
            if t is None:  # meta tensors hold no data: one serves every node of a type
                t = torch.empty_strided(shape, stride, dtype=val.dtype, device="meta")
                t = t.requires_grad_(val.requires_grad) if val.dtype.is_floating_point else t
                self._metas[key] = t
            return t
        if isinstance(val, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return self.number(val)
        if isinstance(val, (list, tuple)):
            return type(val)(self.value(v) for v in val)
        return val


def bind_symbols(gm: torch.fx.GraphModule, args: List[Any],
                 metas: Optional[Dict[Tuple, torch.Tensor]] = None) -> Sizes:
    """Each symbol of ``gm``'s inputs bound to its size in ``args`` (the call's flat inputs).

    Symbols are read from the inputs' sizes and strides where a size is a bare symbol, and
    from SymInt inputs; every input expression must then evaluate to the call's value.
    """
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(args):
        raise SymbolicError(f"{len(args)} inputs for a graph of {len(phs)}")
    sizes = Sizes(metas)
    for n, a in zip(phs, args):
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            if not isinstance(a, torch.Tensor) or a.dim() != val.dim():
                raise SymbolicError(f"input {n.name!r}: expected a {val.dim()}-d tensor")
            for d, (s, actual) in enumerate(zip(val.shape, a.shape)):
                sizes.bind(s, actual, f"input {n.name!r} dim {d}")
        elif isinstance(val, torch.SymInt):
            sizes.bind(val, int(a), f"input {n.name!r}")
    # strides are bound after sizes (a contiguous stride is a product of sizes)
    for n, a in zip(phs, args):
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            for d, s in enumerate(val.stride()):
                if not sizes.bound(s):
                    sizes.bind(s, a.stride(d), f"input {n.name!r} stride {d}")
    for n, a in zip(phs, args):  # every input expression, checked
        val = n.meta.get("val")
        if isinstance(val, torch.Tensor):
            if [sizes.number(s) for s in val.shape] != list(a.shape):
                raise SymbolicError(f"input {n.name!r}: shape {list(a.shape)} is not "
                                    f"{list(val.shape)} under {sizes}")
        elif isinstance(val, torch.SymInt) and sizes.number(val) != int(a):
            raise SymbolicError(f"input {n.name!r}: {a} is not {val} under {sizes}")
    return sizes


def _is_number_val(val: Any) -> bool:
    return isinstance(val, (int, float, bool, torch.SymInt, torch.SymFloat, torch.SymBool))


def specialize(gm: torch.fx.GraphModule, sizes: Sizes) -> torch.fx.GraphModule:
    """A copy of ``gm`` with static sizes: every ``meta['val']`` evaluated under
    ``sizes``, every node that computes a number (``sym_size``, ``s0 * 768``, ...)
    replaced by its value in its users' arguments and removed. Placeholders that are
    SymInts stay, as numbers (the compiled program checks the call passes that value)."""
    g = torch.fx.Graph()
    env: Dict[torch.fx.Node, Any] = {}  # old node -> new node, or the number it computes
    for n in gm.graph.nodes:
        val = n.meta.get("val")
        if n.op == "call_function" and _is_number_val(val):
            env[n] = sizes.number(val)
            continue
        # node_copy copies meta shallowly (a deep copy would copy every fake tensor)
        new = g.node_copy(n, lambda a: env[a])
        if new.target is torch.ops.aten._assert_scalar.default and new.args[0] is False:
            raise SymbolicError(f"node {n.name!r}: the graph asserts {new.args[1]!r}, which "
                                f"these sizes ({sizes}) break")
        if "val" in n.meta:
            new.meta["val"] = sizes.value(val)
        for k in ("example_value", "tensor_meta"):
            new.meta.pop(k, None)
        env[n] = new
    for n in g.nodes:  # nothing symbolic may be left
        for a in (n.args, n.kwargs):
            torch.fx.node.map_aggregate(a, _no_symbols)
    from torch.fx._lazy_graph_module import _make_graph_module, _use_lazy_graph_module
    with _use_lazy_graph_module(True):  # its Python code is made if it ever runs in eager
        return _make_graph_module(gm, g)


def check_guards(sizes: Sizes, shape_env: Any) -> None:
    """Every guard of ``shape_env`` (what tracing assumed of the sizes: ``s0 >= 2``, ``s1 ==
    2*s0``, ...) whose symbols are bound must hold for ``sizes``. Dynamo checks the guards
    it knew when it compiled the graph; a trace made later (``.item()`` inputs) may have
    added some, which only this check sees."""
    import sympy
    for g in getattr(shape_env, "guards", ()):
        e = g.expr
        if not e.free_symbols or not sizes.bound_expr(e):
            continue
        if sympy.sympify(e.xreplace(sizes.binding)) is sympy.false:
            raise SymbolicError(f"the trace assumed {e}, which {sizes} breaks")


def _no_symbols(a: Any) -> Any:
    if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        raise SymbolicError(f"a symbolic number {a} is an argument after substitution")
    return a




class Binder:
    """The compiled form of a symbolic inference graph (aot_autograd's boxed convention):
    each call binds the symbols to its inputs' sizes and runs the graph specialized to them,
    compiled once per binding by ``compile_static(gm, example_inputs)``; ``fallback(args)``
    gives a callable for calls that cannot be bound (an unbound symbol)."""

    def __init__(self, gm: torch.fx.GraphModule, compile_static: Callable,
                 fallback: Callable[[List[Any], str], Callable],
                 on_new_size: Callable[[], None], shape_env: Any = None):
        self._boxed_call = True
        self.shape_env = shape_env
        self.gm = gm
        self.compile_static = compile_static
        self.fallback = fallback
        self.on_new_size = on_new_size
        self.cache: Dict[Tuple, Callable] = {}
        self.metas: Dict[Tuple, torch.Tensor] = {}
        # the inputs whose sizes or strides are symbolic: their sizes and strides (numbers:
        # their values) key the cache, so a size seen before costs no binding
        self.symbolic_inputs = [i for i, n in enumerate(
            n for n in gm.graph.nodes if n.op == "placeholder") if _has_symbols(n.meta.get("val"))]

    def _key(self, args) -> Tuple:
        return tuple((tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else a
                     for a in (args[i] for i in self.symbolic_inputs))

    def specialization(self, args: List[Any]) -> Callable:
        """The compiled program for these inputs' sizes (or eager, if they cannot be bound)."""
        from torch.utils._python_dispatch import _disable_current_modes
        # aot_autograd's run-time wrappers call this under their own dispatch mode, which
        # would see (and slow down 20x) every meta tensor specialize makes
        with _disable_current_modes():
            return self._specialization(args)

    def _specialization(self, args: List[Any]) -> Callable:
        try:
            sizes = bind_symbols(self.gm, args, self.metas)
            check_guards(sizes, self.shape_env)
            static = specialize(self.gm, sizes)
        except SymbolicError as e:
            return self.fallback(args, str(e))
        return self.compile_static(static, list(args))

    def __call__(self, args: List[Any]):
        key = self._key(args)
        fn = self.cache.get(key)
        if fn is None:
            self.on_new_size()
            fn = self.cache[key] = self.specialization(args)
        return fn(args)


def _has_symbols(val: Any) -> bool:
    if isinstance(val, torch.Tensor):
        return any(_expr(s) is not None for s in (*val.shape, *val.stride()))
    return _expr(val) is not None


def is_inference(example_inputs: List[Any]) -> bool:
    """Whether aot_autograd will trace an inference graph (no gradient asked for)."""
    if not torch.is_grad_enabled():
        return True
    return not any(isinstance(a, torch.Tensor) and a.requires_grad for a in example_inputs)


def trace_once(gm: torch.fx.GraphModule, example_inputs: List[Any],
               aot: Callable[..., Callable], make_binder: Callable[[torch.fx.GraphModule],
                                                                    Binder]) -> Callable:
    """aot_autograd over the symbolic Dynamo graph, its inference graph handed to
    ``make_binder`` (``aot(gm, example_inputs, inference_compiler=...)`` is the backend's
    aot_autograd call)."""
    made: List[Optional[Binder]] = [None]

    def inference_compiler(agm: torch.fx.GraphModule, ex) -> Callable:
        made[0] = make_binder(agm)
        return made[0]
    cg = aot(gm, example_inputs, inference_compiler=inference_compiler)
    if made[0] is None:
        raise SymbolicError("aot_autograd traced no inference graph")
    return cg
