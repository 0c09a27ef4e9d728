"""Compiling one FX graph of core ATen ops with fxhlo and running it on torch tensors.

:func:`compile_graph_module` takes a ``torch.fx.GraphModule`` whose nodes carry
``meta['val']`` (as aot_autograd's graphs do), writes it as fxjson, compiles it in-process with
the Rust compiler (through the on-disk cache) and returns a :class:`CompiledGraph`.

What runs where:

* outputs computed by ops are compiled; the compiled program writes them straight into
  ``torch`` tensors (no copy out), whose memory comes from an :class:`OutputPool`: a large
  output's storage is handed out again once nobody holds it any more (no page faults of fresh
  memory on every call);
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
import threading
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
class GraphStats:
    """What became of one graph the backend received (an aot_autograd forward, backward or
    inference graph, or a Dynamo graph that ran in eager before reaching aot_autograd)."""

    name: str
    #: op nodes of the graph as received
    nodes: int = 0
    #: inputs (parameters and buffers) compiled as constants (fxhlo/freezing.py)
    frozen: int = 0
    #: nodes computed from constants alone, evaluated once at compile time (see
    #: :func:`fold_constants`)
    folded: int = 0
    #: parts compiled by fxhlo (1 when the whole graph is)
    compiled_partitions: int = 0
    #: parts run in eager: connected groups of unsupported nodes, parts that failed to
    #: compile or to run, or the whole graph
    eager_partitions: int = 0
    #: unsupported ops run in eager, with their node counts
    eager_ops: Dict[str, int] = field(default_factory=dict)
    #: steps of the compiled programs, and how many of them run on the reference interpreter
    steps: int = 0
    fallback_steps: int = 0
    #: the distinct reasons of those interpreter steps (short), with their step counts
    fallback_reasons: Dict[str, int] = field(default_factory=dict)
    #: why (part of) the graph runs in eager, when it does
    eager_reasons: List[str] = field(default_factory=list)
    #: calls of its compiled programs
    runs: int = 0
    #: milliseconds spent encoding and compiling it (fxhlo's part of the first call)
    compile_ms: float = 0.0


@dataclass
class Stats:
    """Process-wide counters of the backend (for tests and reports); ``fxhlo.stats()``
    returns them as a dict."""

    graphs_compiled: int = 0
    cache_hits: int = 0
    cache_misses: int = 0
    compile_seconds: float = 0.0
    fallback_graphs: int = 0
    partitions: int = 0
    runs: int = 0
    #: graphs with symbolic shapes traced once (fxhlo/symbolic.py), and the sizes they were
    #: specialized to (each an fxhlo compile, or a cache hit)
    symbolic_graphs: int = 0
    specializations: int = 0
    events: List[str] = field(default_factory=list)
    #: per graph, by name (``g0_forward``, ...)
    graphs: Dict[str, GraphStats] = field(default_factory=dict)

    def reset(self) -> None:
        """Zero every counter."""
        self.__init__()

    def as_dict(self) -> Dict[str, Any]:
        """The counters as plain data: totals, plus ``graphs``: per graph, its steps,
        interpreter steps, eager parts and their reasons."""
        from dataclasses import asdict
        return asdict(self)


STATS = Stats()


@dataclass
class CompileConfig:
    """What the backend's options say about compiling one graph."""

    opt_level: int = 2
    threads: Optional[int] = None
    cache: bool = True
    cache_dir: Optional[str] = None
    dump_dir: Optional[str] = None
    freezing: bool = True
    symbolic: bool = True


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


#: Graphs whose constants take more bytes than this (frozen weights of real models) are
#: compiled with their weights handed over by address and not through the disk cache: hashing
#: them for the key and writing them into an entry would cost about as much as compiling
#: (BERT-base, 417 MiB: ~1 s to hash, a 437 MB entry per model), and serializing them ~1 s.
CACHE_MAX_WEIGHT_BYTES = 64 << 20


def _weight_refs(weights: Dict[str, torch.Tensor]) -> Tuple[list, list]:
    """``(refs, keep)``: ``(name, dtype, shape, data_ptr, nbytes)`` of each weight made
    contiguous, and the tensors to keep alive while the compiler reads them."""
    refs, keep = [], []
    for k, v in weights.items():
        t = v.detach().contiguous()
        keep.append(t)
        refs.append((k, DTYPE_NAMES[t.dtype], list(t.shape), t.data_ptr() if t.numel() else 0,
                     t.numel() * t.element_size()))
    return refs, keep


def compile_native(text: str, weights: Dict[str, torch.Tensor], cfg: CompileConfig,
                   what: str = "graph"):
    """Compiles fxjson ``text`` (constants in ``weights``) through the disk cache.

    Returns the native ``Compiled``.  Raises ``fxhlo.CompileError`` when the graph is refused.
    """
    nbytes = sum(v.numel() * v.element_size() for v in weights.values())
    if nbytes > CACHE_MAX_WEIGHT_BYTES:
        t0 = time.perf_counter()
        refs, keep = _weight_refs(weights)
        c = _native.compile_with_weights(text, refs, opt_level=cfg.opt_level,
                                         threads=cfg.threads)
        del keep
        dt = time.perf_counter() - t0
        STATS.graphs_compiled += 1
        STATS.compile_seconds += dt
        log.debug("fxhlo: %s compiled in %.2f ms with %d MiB of weights by address (not "
                  "cached)", what, dt * 1e3, nbytes >> 20)
        return c
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


class OutputPool:
    """Reuses the memory of a compiled graph's outputs across calls, as ONNX Runtime's arena
    and PyTorch's caching allocators do.

    After a call, the pool keeps a reference to each large output's storage.  At the next
    call, a kept storage whose only remaining reference is the pool's
    (``torch._C._storage_Use_Count == 1``: the caller dropped the tensor and every view of
    it) backs the new output; one still in use is left to its holder and a fresh tensor is
    allocated.  So an output is never overwritten while anyone can see it.  Outputs under
    ``MIN_BYTES`` are left to the allocator (fast for small sizes); the memory the pools of
    all graphs keep is at most ``FXHLO_OUTPUT_POOL_MIB`` MiB (default 1024; 0 turns pooling
    off), so many compiled specializations cannot hoard memory.
    """

    MIN_BYTES = 256 << 10
    _lock = threading.Lock()
    _held = [0]  # bytes kept by every pool of the process

    def __init__(self, specs: List[Tuple[torch.dtype, Tuple[int, ...]]]):
        self.specs = specs
        self.nbytes = [_numel(s) * torch.empty(0, dtype=d).element_size() for d, s in specs]
        self.kept: List[Optional[Any]] = [None] * len(specs)
        limit = os.environ.get("FXHLO_OUTPUT_POOL_MIB", "1024")
        try:
            self.limit = max(0, int(limit)) << 20
        except ValueError:
            self.limit = 1024 << 20

    def take(self) -> List[torch.Tensor]:
        """Tensors for the outputs of one call."""
        outs = []
        for k, (d, shape) in enumerate(self.specs):
            st = None
            with self._lock:
                if self.kept[k] is not None:
                    st, self.kept[k] = self.kept[k], None
                    OutputPool._held[0] -= self.nbytes[k]
            if (st is not None and torch._C._storage_Use_Count(st._cdata) == 1
                    and st.nbytes() >= self.nbytes[k]):
                outs.append(torch.empty(0, dtype=d).set_(st, 0, shape,
                                                         _contiguous_strides(shape)))
            else:
                outs.append(torch.empty(shape, dtype=d))
        return outs

    def give(self, outs: List[torch.Tensor]) -> None:
        """Keeps the storages of a call's large outputs for a later call."""
        for k, t in enumerate(outs):
            n = self.nbytes[k]
            if n < self.MIN_BYTES:
                continue
            with self._lock:
                if self.kept[k] is None and OutputPool._held[0] + n <= self.limit:
                    self.kept[k] = t.untyped_storage()
                    OutputPool._held[0] += n

    def release(self) -> None:
        with self._lock:
            for k, st in enumerate(self.kept):
                if st is not None:
                    OutputPool._held[0] -= self.nbytes[k]
                    self.kept[k] = None

    def __del__(self):
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _numel(shape: Sequence[int]) -> int:
    n = 1
    for d in shape:
        n *= int(d)
    return n


def _contiguous_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(int(d), 1)
    return tuple(reversed(strides))


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
        # | ("constant", tensor) | ("const", value)
        self.out_plan = out_plan
        self.out_specs = [] if native is None else [
            (DTYPES_BY_NAME[d], tuple(s)) for _, d, s in native.output_specs()]
        self.pool = OutputPool(self.out_specs)
        self.name = name
        # [(arg index, value)]: number inputs the graph was specialized to
        self.number_checks: List[Tuple[int, Any]] = []
        #: the counters of the graph this program belongs to (runs are counted there)
        self.stats: Optional[GraphStats] = None

    def steps(self) -> Tuple[int, List[Tuple[str, int, str]]]:
        """The program's step count and its steps on the reference interpreter:
        ``(steps, [(step name, node count, reason)])``."""
        if self.native is None:
            return 0, []
        return self.native.fallback_steps()

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
        outs = self.pool.take()
        if self.native is not None and (outs or ptrs):
            self.native.run_ptrs(ptrs, [o.data_ptr() for o in outs])
        self.pool.give(outs)
        STATS.runs += 1
        if self.stats is not None:
            self.stats.runs += 1
        del keep
        res = []
        for kind, x in self.out_plan:
            if kind == "compiled":
                res.append(outs[x])
            elif kind == "arg":
                res.append(args[x])
            elif kind == "view":
                res.append(_eval_view(x[0], x[1], args))
            elif kind == "constant":
                res.append(x.clone())  # a fresh tensor per call, as eager computes it
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
            elif o.op == "get_attr":
                out_plan.append(("constant", _attr(gm, o.target)))
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
    arguments become the numbers (graphs are specialized to them); ``lift_fresh_copy`` of a
    tensor constant (``torch.tensor(...)`` in the traced code) becomes ``clone``, the copy it
    is; see :func:`_full_conv_backward_mask`.  (A Python number where the schema wants a
    tensor, ``aten.sub.Tensor(1, x)``, is left to the fxjson reader, which makes it a 0-d
    tensor as ATen's promotion of a wrapped number does.)"""
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
        elif n.target is torch.ops.aten.lift_fresh_copy.default:
            n.target = torch.ops.aten.clone.default
            changed = True
    if changed:
        gm.recompile()


def _attr(gm: torch.nn.Module, target: str) -> Any:
    t = gm
    for part in str(target).split("."):
        t = getattr(t, part)
    return t


#: Most elements of a value :func:`fold_constants` evaluates (the constants it makes are
#: compiled into the program and hashed into the cache key).
FOLD_MAX_ELEMENTS = 1 << 20


def _foldable(n: torch.fx.Node) -> bool:
    """Whether ``n`` may be evaluated at compile time if its inputs are constants: a
    functional ATen op that draws no random numbers (or a getitem), whose results are tensors
    of at most :data:`FOLD_MAX_ELEMENTS` elements with static shapes."""
    if n.op != "call_function":
        return False
    if n.target is not operator.getitem:
        t = n.target
        if not isinstance(t, torch._ops.OpOverload) or t._schema.is_mutable \
                or torch.Tag.nondeterministic_seeded in t.tags \
                or torch.Tag.nondeterministic_bitwise in t.tags:
            return False
    val = n.meta.get("val")
    vals = val if isinstance(val, (list, tuple)) else [val]
    for v in vals:
        if not isinstance(v, torch.Tensor) or not all(isinstance(d, int) for d in v.shape) \
                or v.numel() > FOLD_MAX_ELEMENTS:
            return False
    return True


def fold_constants(gm: torch.fx.GraphModule, unsupported) -> int:
    """Evaluates, once, in torch, the values of ``gm`` that fxhlo cannot compile
    (``unsupported(node)`` is true) and that are computed from constants alone: tensor
    constants (``get_attr``), numbers and the ops' own arguments, with no graph input among
    their transitive inputs (so never from parameters, which are graph inputs), by ops that
    draw no random numbers, of at most :data:`FOLD_MAX_ELEMENTS` elements (``triu_indices``
    of a DLRM interaction, index tensors built with ``arange``).  Each becomes a tensor
    constant of the graph, so an op outside fxhlo's op table no longer splits it; the
    supported ops around it stay (the Rust compiler folds those itself).  Returns the number
    of nodes replaced; a node whose evaluation fails (or disagrees with its recorded type)
    stays."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily

    graph = gm.graph
    const: set = set()
    for n in graph.nodes:
        if n.op == "get_attr":
            if isinstance(_attr(gm, n.target), torch.Tensor):
                const.add(n)
        elif _foldable(n) and all(a in const for a in n.all_input_nodes):
            const.add(n)
    targets = [n for n in graph.nodes if n in const and n.op == "call_function"
               and isinstance(n.meta.get("val"), torch.Tensor) and unsupported(n)]
    if not targets:
        return 0
    values: Dict[torch.fx.Node, Any] = {}

    def value(n: torch.fx.Node) -> Any:
        if n not in values:
            if n.op == "get_attr":
                values[n] = _attr(gm, n.target)
            else:
                args = torch.fx.node.map_arg(n.args, value)
                kwargs = torch.fx.node.map_arg(n.kwargs, value)
                values[n] = n.target(*args, **kwargs)
        return values[n]

    folded = 0
    with unset_fake_temporarily(), torch.no_grad():
        for n in targets:
            try:
                v = value(n)
            except Exception as e:  # noqa: BLE001 - not folded; the node stays as it is
                log.debug("fxhlo: %s not folded: %s: %s", n.name, type(e).__name__, e)
                continue
            want = n.meta["val"]
            if not isinstance(v, torch.Tensor) or v.dtype != want.dtype \
                    or tuple(v.shape) != tuple(want.shape):
                continue
            attr = f"_fxhlo_folded_{n.name}"
            setattr(gm, attr, v.detach().contiguous())
            with graph.inserting_before(n):
                c = graph.get_attr(attr)
            c.meta["val"] = want
            n.replace_all_uses_with(c)
            folded += 1
    # the folded nodes, and the constant nodes only they read
    for n in reversed(list(graph.nodes)):
        if n in const and n.op in ("call_function", "get_attr") and not n.users:
            graph.erase_node(n)
    graph.lint()
    gm.recompile()
    return folded


def graph_ops(gm: torch.fx.GraphModule) -> List[str]:
    """Names of the ops of ``gm``'s call_function nodes, in order (getitem excluded)."""
    from .dump import _op_name
    res = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is not operator.getitem:
            res.append(_op_name(n.target) if isinstance(n.target, torch._ops.OpOverload)
                       else str(n.target))
    return res
