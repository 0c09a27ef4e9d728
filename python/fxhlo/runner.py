"""Compiling one FX graph of core ATen ops with fxhlo and running it on torch tensors.

:func:`compile_graph_module` takes a ``torch.fx.GraphModule`` whose nodes carry
``meta['val']`` (as aot_autograd's graphs do), writes it as fxjson, compiles it in-process with
the Rust compiler (through the on-disk cache) and returns a :class:`CompiledGraph`.

What runs where:

* outputs computed by ops are compiled; the compiled program writes them straight into freshly
  allocated ``torch.empty`` tensors (no copy out);
* inputs are passed by data pointer (no copy in); an input that is not contiguous is made
  contiguous once per call (one copy of that input);
* outputs that are graph inputs, or views of graph inputs (``x.t()``, ``x[1:]``), are not
  compiled: they are produced from the real input tensors by the same view ops in eager, so they
  alias their inputs exactly as in eager;
* ``None`` and other constant (non-tensor) outputs are returned as they are.
"""

from __future__ import annotations

import logging
import operator
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx

from . import _native
from .cache import cache_key, get_cache
from .dump import DTYPE_NAMES, DTYPES_BY_NAME, graph_module_to_fxjson, to_json_text

log = logging.getLogger("fxhlo")


@dataclass
class Stats:
    """Process-wide counters of the backend (for tests and reports)."""

    graphs_compiled: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    compile_seconds: float = 0.0
    fallback_graphs: int = 0
    partitions: int = 0
    runs: int = 0
    events: List[str] = field(default_factory=list)

    def reset(self) -> None:
        """Zero every counter."""
        self.__init__()


STATS = Stats()


@dataclass
class CompileConfig:
    """What the backend's options say about compiling one graph."""

    opt_level: int = 2
    threads: Optional[int] = None
    cache: bool = True
    cache_dir: Optional[str] = None
    dump_dir: Optional[str] = None


def _is_input_alias(n: torch.fx.Node, memo: Dict[torch.fx.Node, bool]) -> bool:
    """Whether ``n`` is a placeholder or a chain of single-result view ops of one."""
    if n in memo:
        return memo[n]
    r = False
    if n.op == "placeholder":
        r = True
    elif (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
          and n.target.is_view and isinstance(n.meta.get("val"), torch.Tensor)
          and n.args and isinstance(n.args[0], torch.fx.Node)):
        others = [a for a in n.all_input_nodes if a is not n.args[0]]
        r = not others and _is_input_alias(n.args[0], memo)
    memo[n] = r
    return r


def _dump(dump_dir: str, name: str, text: str, weights: Dict[str, torch.Tensor]) -> None:
    """Writes a graph as ``<dump_dir>/<name>/graph.json`` (+ weights), ready for the CLI."""
    d = os.path.join(dump_dir, name)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "graph.json"), "w") as f:
        f.write(text)
    if weights:
        from safetensors.torch import save_file
        save_file(weights, os.path.join(d, "weights.safetensors"))


def _weights_bytes(weights: Dict[str, torch.Tensor]) -> Optional[bytes]:
    if not weights:
        return None
    from safetensors.torch import save
    return save({k: v.contiguous() for k, v in weights.items()})


def compile_native(text: str, weights: Dict[str, torch.Tensor], cfg: CompileConfig,
                   what: str = "graph"):
    """Compiles fxjson ``text`` (constants in ``weights``) through the disk cache.

    Returns the native ``Compiled``.  Raises ``fxhlo.CompileError`` when the graph is refused.
    """
    wbytes = _weights_bytes(weights)
    t0 = time.perf_counter()
    key = None
    cache = get_cache(cfg.cache_dir) if cfg.cache else None
    if cache is not None:
        # the safetensors bytes hold every constant's name, type and data (keys sorted)
        consts = [("safetensors", "", (), wbytes)] if wbytes else []
        key = cache_key(text, consts, cfg.opt_level, _native.version())
        data = cache.get(key)
        if data is not None:
            try:
                c = _native.load_artifact(data, threads=cfg.threads)
                dt = time.perf_counter() - t0
                STATS.cache_hits += 1
                STATS.compile_seconds += dt
                log.debug("fxhlo cache hit: %s %s loaded from %s in %.2f ms", what, key[:16],
                          cache.path(key), dt * 1e3)
                return c
            except _native.FxhloError as e:
                log.warning("fxhlo cache: entry %s cannot be loaded (%s); recompiling",
                            cache.path(key), e)
                cache.remove(key)
        STATS.cache_misses += 1
    c = _native.compile(text, wbytes, opt_level=cfg.opt_level, threads=cfg.threads)
    dt = time.perf_counter() - t0
    STATS.graphs_compiled += 1
    STATS.compile_seconds += dt
    if cache is not None and key is not None:
        cache.put(key, c.to_bytes())
        log.debug("fxhlo cache miss: %s %s compiled in %.2f ms, stored in %s", what, key[:16],
                  dt * 1e3, cache.path(key))
    else:
        log.debug("fxhlo: %s compiled in %.2f ms (cache off)", what, dt * 1e3)
    return c


_dump_seq = [0]


class CompiledGraph:
    """Runs a compiled graph on torch tensors; called with the graph's inputs as a list
    (aot_autograd's boxed convention) and returns the graph's outputs as a list."""

    def __init__(self, native, n_args: int, in_plan, out_plan, name: str):
        # an instance attribute, so that wrappers made with functools.wraps (Dynamo's
        # disable() around backward compilers) keep it
        self._boxed_call = True
        self.native = native
        self.n_args = n_args
        # [(arg index, torch dtype, shape)] in the program's input order
        self.in_plan: List[Tuple[int, torch.dtype, Tuple[int, ...]]] = in_plan
        # [(kind, x)]: ("compiled", k) | ("arg", i) | ("view", (node, placeholder index map))
        # | ("const", value)
        self.out_plan = out_plan
        self.out_specs = [] if native is None else [
            (DTYPES_BY_NAME[d], tuple(s)) for _, d, s in native.output_specs()]
        self.name = name
        # [(arg index, value)]: number inputs the graph was specialized to
        self.number_checks: List[Tuple[int, Any]] = []

    def __call__(self, args: Sequence[Any]) -> List[Any]:
        if len(args) != self.n_args:
            raise _native.ExecutionError(f"{self.name}: called with {len(args)} inputs, the "
                                         f"graph takes {self.n_args}")
        for i, v in self.number_checks:
            if args[i] != v:
                raise _native.ExecutionError(f"{self.name}: input {i} is {args[i]!r}, the graph "
                                             f"was compiled for {v!r}")
        keep, ptrs = [], []
        for i, dt, shape in self.in_plan:
            t = args[i]
            if not isinstance(t, torch.Tensor):
                raise _native.ExecutionError(f"{self.name}: input {i} is a {type(t).__name__}, "
                                             f"expected a tensor")
            if t.device.type != "cpu" or t.dtype != dt or tuple(t.shape) != shape:
                raise _native.ExecutionError(
                    f"{self.name}: input {i} is {t.dtype}{list(t.shape)} on {t.device}, the "
                    f"compiled graph expects {dt}{list(shape)} on cpu")
            if t.requires_grad:
                t = t.detach()
            if not t.is_contiguous():
                t = t.contiguous()
            keep.append(t)
            ptrs.append(t.data_ptr())
        outs = [torch.empty(s, dtype=d) for d, s in self.out_specs]
        if self.native is not None and (outs or ptrs):
            self.native.run_ptrs(ptrs, [o.data_ptr() for o in outs])
        STATS.runs += 1
        del keep
        res = []
        for kind, x in self.out_plan:
            if kind == "compiled":
                res.append(outs[x])
            elif kind == "arg":
                res.append(args[x])
            elif kind == "view":
                res.append(_eval_view(x[0], x[1], args))
            else:
                res.append(x)
        return res

    def __repr__(self) -> str:
        return f"<CompiledGraph {self.name}: {self.native!r}>"


def _eval_view(node: torch.fx.Node, ph_index: Dict[torch.fx.Node, int], args) -> torch.Tensor:
    """Evaluates a chain of view ops of a placeholder on the real inputs (eager)."""
    if node.op == "placeholder":
        return args[ph_index[node]]
    src = _eval_view(node.args[0], ph_index, args)
    return node.target(src, *node.args[1:], **node.kwargs)


def compile_graph_module(gm: torch.fx.GraphModule, cfg: CompileConfig,
                         name: str = "graph") -> CompiledGraph:
    """Compiles ``gm`` (core ATen ops, ``meta['val']`` on every node, static shapes).

    Raises ``fxhlo.FxhloError`` (or ``fxhlo.dump.DumpError``) when it cannot be compiled; the
    caller decides whether to fall back to eager.
    """
    graph = gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    ph_index = {n: i for i, n in enumerate(placeholders)}
    out_node = next(n for n in graph.nodes if n.op == "output")
    outs = out_node.args[0]
    single = not isinstance(outs, (list, tuple))
    outs = [outs] if single else list(outs)

    memo: Dict[torch.fx.Node, bool] = {}
    compiled: List[torch.fx.Node] = []
    compiled_index: Dict[torch.fx.Node, int] = {}
    out_plan: List[Tuple[str, Any]] = []
    for o in outs:
        if isinstance(o, torch.fx.Node):
            if o.op == "placeholder":
                out_plan.append(("arg", ph_index[o]))
            elif _is_input_alias(o, memo):
                out_plan.append(("view", (o, ph_index)))
            else:
                if not isinstance(o.meta.get("val"), torch.Tensor):
                    raise _native.CompileError(f"{name}: output {o.name!r} is not a tensor "
                                               f"({type(o.meta.get('val')).__name__})")
                if o not in compiled_index:
                    compiled_index[o] = len(compiled)
                    compiled.append(o)
                out_plan.append(("compiled", compiled_index[o]))
        elif o is None or isinstance(o, (int, float, bool)):
            out_plan.append(("const", o))
        else:
            raise _native.CompileError(f"{name}: output {o!r} ({type(o).__name__}) is not "
                                       f"supported")

    native, in_plan = None, []
    if compiled:
        g, weights = graph_module_to_fxjson(gm, outputs=compiled)
        if weights:
            g["weights"] = "weights.safetensors"
        text = to_json_text(g)
        if cfg.dump_dir:
            _dump_seq[0] += 1
            _dump(cfg.dump_dir, f"{_dump_seq[0]:03d}_{name}", text, weights)
        native = compile_native(text, weights, cfg, what=name)
        by_name = {n.name: i for i, n in enumerate(placeholders)}
        for spec_name, d, s in native.input_specs():
            if spec_name not in by_name:
                raise _native.CompileError(f"{name}: compiled program input {spec_name!r} is "
                                           f"not a graph input")
            in_plan.append((by_name[spec_name], DTYPES_BY_NAME[d], tuple(s)))
        for node, (spec_name, d, s) in zip(compiled, native.output_specs()):
            v = node.meta["val"]
            if DTYPE_NAMES.get(v.dtype) != d or list(v.shape) != list(s):
                raise _native.CompileError(
                    f"{name}: output {node.name!r} compiles to {d}{list(s)}, torch expects "
                    f"{v.dtype}{list(v.shape)}")
        if len(native.output_specs()) != len(compiled):
            raise _native.CompileError(f"{name}: compiled program has "
                                       f"{len(native.output_specs())} outputs, expected "
                                       f"{len(compiled)}")
    cg = CompiledGraph(native, len(placeholders), in_plan, out_plan, name)
    cg.number_checks = [(i, n.meta["val"]) for i, n in enumerate(placeholders)
                        if isinstance(n.meta.get("val"), (int, float, bool))]
    return cg


def _first_tensor_scalar_to_tensor(graph: torch.fx.Graph, n: torch.fx.Node) -> bool:
    """``aten.sub.Tensor(1, x)``: a Python number where the schema's first argument is a
    Tensor (aot_autograd writes such nodes in backward graphs) becomes a 0-dim
    ``aten.scalar_tensor`` of the other operand's dtype; a wrapped number of the same or a lower
    category does not change type promotion, so the result type is unchanged."""
    schema = n.target._schema
    if not n.args or not schema.arguments:
        return False
    a0 = schema.arguments[0]
    v = n.args[0]
    if not isinstance(a0.real_type, torch.TensorType) or isinstance(v, torch.fx.Node) \
            or not isinstance(v, (int, float, bool)):
        return False
    other = next((a.meta.get("val") for a in n.all_input_nodes
                  if isinstance(a.meta.get("val"), torch.Tensor)), None)
    if other is None:
        return False
    if isinstance(v, float) and not other.is_floating_point():
        dt = torch.get_default_dtype()
    elif isinstance(v, int) and not isinstance(v, bool) and other.dtype == torch.bool:
        dt = torch.int64
    else:
        dt = other.dtype
    with graph.inserting_before(n):
        s = graph.call_function(torch.ops.aten.scalar_tensor.default, (v,), {"dtype": dt})
    s.meta["val"] = torch.empty((), dtype=dt, device="meta")
    n.args = (s,) + tuple(n.args[1:])
    return True


def _full_conv_backward_mask(n: torch.fx.Node) -> bool:
    """``convolution_backward`` with a False in ``output_mask`` returns None there, which the
    IR cannot type: ask for every gradient (the extra ones are unused) and record their types."""
    args = list(n.args)
    if len(args) < 11 or not isinstance(n.meta.get("val"), (list, tuple)):
        return False
    mask = list(args[10])
    if all(mask):
        return False
    grad_out, inp, weight = (a.meta["val"] for a in args[:3])
    transposed, groups = args[7], args[9]
    if args[3] is None:
        args[3] = [weight.shape[1] * groups if transposed else weight.shape[0]]
    bias_shape = tuple(args[3])
    val = list(n.meta["val"])
    fills = [torch.empty(inp.shape, dtype=inp.dtype, device="meta"),
             torch.empty(weight.shape, dtype=weight.dtype, device="meta"),
             torch.empty(bias_shape, dtype=grad_out.dtype, device="meta")]
    for i in range(3):
        if not mask[i] or val[i] is None:
            val[i] = fills[i]
    args[10] = [True, True, True]
    n.args = tuple(args)
    n.meta["val"] = tuple(val)
    return True


def prepare_graph(gm: torch.fx.GraphModule) -> None:
    """Rewrites what aot_autograd writes but fxjson cannot say, in place: number inputs used as
    arguments become the numbers (graphs are specialized to them), and see the helpers."""
    changed = False
    for n in list(gm.graph.nodes):
        v = n.meta.get("val")
        if n.op == "placeholder" and isinstance(v, (int, float, bool)) and n.users:
            # a size that is a concrete number in this (specialized) graph: use the number
            for u in list(n.users):
                u.args = torch.fx.node.map_arg(u.args, lambda a: v if a is n else a)
                u.kwargs = torch.fx.node.map_arg(u.kwargs, lambda a: v if a is n else a)
            changed = True
        if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
            continue
        if n.target is torch.ops.aten.convolution_backward.default:
            changed |= _full_conv_backward_mask(n)
        else:
            changed |= _first_tensor_scalar_to_tensor(gm.graph, n)
    if changed:
        gm.recompile()


def graph_ops(gm: torch.fx.GraphModule) -> List[str]:
    """Names of the ops of ``gm``'s call_function nodes, in order (getitem excluded)."""
    from .dump import _op_name
    res = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            res.append(_op_name(n.target) if isinstance(n.target, torch._ops.OpOverload)
                       else str(n.target))
    return res
