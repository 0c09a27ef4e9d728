"""The ``fxhlo`` backend of ``torch.compile``.

    model = torch.compile(model, backend="fxhlo")             # registered by entry point
    model = torch.compile(model, backend="fxhlo",
                          options={"opt_level": 2, "threads": 4, "dump_dir": "/tmp/g"})

Every graph Dynamo captures goes through ``aot_autograd`` with the core ATen decompositions
(the table ``torch.export``'s ``run_decompositions()`` uses, less the ops fxhlo compiles
natively, so the graphs hold the ops of fxhlo's op table); the forward, backward and inference graphs it produces are each compiled
in-process by the Rust compiler (:mod:`fxhlo.runner`) and run on the torch tensors without
copies.  Graphs with ops fxhlo does not support are partitioned: the supported parts are
compiled, the rest runs in eager, and one :class:`FxhloFallbackWarning` names the ops.  Graphs
with symbolic shapes (``dynamic=True``, or Dynamo's automatic dynamic shapes after a shape
change) are compiled once per concrete input shape at run time.  See docs/torch-backend.md.
"""

from __future__ import annotations

import itertools
import logging
import operator
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.fx

from . import _native
from .dump import DTYPE_NAMES, DumpError, _DROPPED_OPS, _op_name
from .runner import STATS, CompileConfig, compile_graph_module, prepare_graph

log = logging.getLogger("fxhlo")

OPTIONS = {
    "opt_level": "optimization level 0, 1 or 2 (default 2)",
    "threads": "worker threads of the compiled programs (default: FXHLO_NUM_THREADS or all "
               "cores)",
    "dump_dir": "write every graph received, as fxjson, into this folder (one sub-folder per "
                "graph)",
    "cache": "use the on-disk compile cache (default True)",
    "cache_dir": "folder of the compile cache (default: FXHLO_CACHE_DIR or ~/.cache/fxhlo)",
    "strict": "raise fxhlo.FxhloError instead of falling back to eager (default False)",
}


class FxhloFallbackWarning(UserWarning):
    """Part of a graph runs in eager because fxhlo cannot compile it."""


def parse_options(options: Optional[Dict[str, Any]]) -> tuple:
    """Checks the ``options`` of ``torch.compile``; returns ``(CompileConfig, strict)``."""
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ValueError(f"fxhlo: unknown option(s) {', '.join(unknown)}; known: "
                         + "; ".join(f"{k}: {v}" for k, v in OPTIONS.items()))
    lvl = options.get("opt_level", 2)
    if lvl not in (0, 1, 2):
        raise ValueError(f"fxhlo: opt_level must be 0, 1 or 2, got {lvl!r}")
    threads = options.get("threads")
    if threads is not None and (not isinstance(threads, int) or threads < 1):
        raise ValueError(f"fxhlo: threads must be a positive integer, got {threads!r}")
    cfg = CompileConfig(opt_level=int(lvl), threads=threads,
                        cache=bool(options.get("cache", True)),
                        cache_dir=options.get("cache_dir"),
                        dump_dir=options.get("dump_dir"))
    return cfg, bool(options.get("strict", False))


def _boxed(fn: Callable) -> Callable:
    """``fn(*args)`` in aot_autograd's boxed calling convention (one list argument)."""
    def run(args):
        return fn(*args)
    run._boxed_call = True
    return run


def _tensor_vals(val) -> Optional[List[torch.Tensor]]:
    if isinstance(val, torch.Tensor):
        return [val]
    if isinstance(val, (list, tuple)) and all(isinstance(v, torch.Tensor) for v in val):
        return list(val)
    return None


def _static(t: torch.Tensor) -> bool:
    return all(isinstance(d, int) for d in t.shape)


def _is_dynamic(values: Sequence[Any]) -> bool:
    """Whether any value is a symbolic scalar or a tensor with a symbolic size."""
    for v in values:
        if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return True
        if isinstance(v, torch.Tensor) and not _static(v):
            return True
    return False


class _Support:
    """Which nodes fxhlo can compile: ops of its table on fxjson dtypes with static shapes."""

    def __init__(self, supported: set):
        self.supported = supported

    def why_not(self, node: torch.fx.Node) -> Optional[str]:
        """None when ``node`` is supported, else the name under which it is reported."""
        if node.op != "call_function":
            return None if node.op in ("placeholder", "output", "get_attr") else node.op
        t = node.target
        if t is operator.getitem:
            src = node.args[0]
            return None if isinstance(src, torch.fx.Node) and self.why_not(src) is None \
                else "getitem"
        if not isinstance(t, torch._ops.OpOverload):
            return getattr(t, "__name__", str(t))
        name = _op_name(t)
        if name in _DROPPED_OPS:
            return None
        if name not in self.supported:
            return name
        vals = _tensor_vals(node.meta.get("val"))
        if vals is None:
            return f"{name} (non-tensor result)"
        for v in vals:
            if v.dtype not in DTYPE_NAMES:
                return f"{name} ({v.dtype})"
            if not _static(v):
                return f"{name} (symbolic shape)"
        for a in node.all_input_nodes:
            av = a.meta.get("val")
            if isinstance(av, torch.Tensor) and av.dtype not in DTYPE_NAMES:
                return f"{name} ({av.dtype} operand)"
        return None


def _operator_support(support: _Support):
    from torch.fx.passes.operator_support import OperatorSupportBase

    class S(OperatorSupportBase):
        def is_node_supported(self, submodules, node):
            return node.op == "call_function" and support.why_not(node) is None

    return S()


class _CompiledModule(torch.nn.Module):
    """Stands in for a fused partition: runs its compiled graph."""

    def __init__(self, compiled, single: bool):
        super().__init__()
        self.compiled = compiled
        self.single = single

    def forward(self, *args):
        res = self.compiled(list(args))
        return res[0] if self.single else tuple(res)


_graph_ids = itertools.count()


class Session:
    """One Dynamo graph: compiles the forward, backward and inference graphs aot_autograd
    makes of it, and warns once about what falls back."""

    def __init__(self, cfg: CompileConfig, strict: bool):
        self.cfg = cfg
        self.strict = strict
        self.id = next(_graph_ids)
        self.warned: set = set()
        self._supported: Optional[set] = None

    @property
    def support(self) -> _Support:
        if self._supported is None:
            self._supported = set(_native.supported_ops())
        return _Support(self._supported)

    def fallback(self, what: str, reason: str) -> None:
        """Reports (once per reason) that ``what`` runs in eager; raises when strict."""
        STATS.fallback_graphs += 1
        STATS.events.append(f"{what}: {reason}")
        if self.strict:
            raise _native.FxhloError(f"fxhlo (strict): {what}: {reason}")
        if reason not in self.warned:
            self.warned.add(reason)
            warnings.warn(f"fxhlo: {what}: {reason}", FxhloFallbackWarning, stacklevel=2)

    def compiler(self, kind: str) -> Callable:
        """An aot_autograd compiler (``fw_compiler`` etc.) for graphs of ``kind``."""
        def compile_fn(gm: torch.fx.GraphModule, example_inputs):
            return self.compile(gm, example_inputs, f"g{self.id}_{kind}")
        return compile_fn

    def compile(self, gm: torch.fx.GraphModule, example_inputs, name: str) -> Callable:
        """Compiles one ATen graph; returns a boxed callable."""
        phs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        if _is_dynamic(phs) or _is_dynamic(list(example_inputs)):
            self.fallback(name, "the graph has symbolic shapes; running it in eager")
            return _boxed(gm)
        prepare_graph(gm)
        support = self.support
        bad: Dict[str, int] = {}
        for n in gm.graph.nodes:
            r = support.why_not(n)
            if r is not None:
                bad[r] = bad.get(r, 0) + 1
        if not bad:
            try:
                return compile_graph_module(gm, self.cfg, name)
            except (_native.FxhloError, DumpError) as e:
                self.fallback(name, f"cannot be compiled, running it in eager: {e}")
                return _boxed(gm)
        return self._partition(gm, name, bad)

    def _partition(self, gm: torch.fx.GraphModule, name: str, bad: Dict[str, int]) -> Callable:
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

        ops = ", ".join(f"{k} ({v} node{'s' if v > 1 else ''})" for k, v in sorted(bad.items()))
        msg = (f"op(s) not supported by fxhlo yet, run in eager: {ops}; the other parts of the "
               f"graph are compiled")
        if self.strict:
            self.fallback(name, msg)
        part = CapabilityBasedPartitioner(gm, _operator_support(self.support),
                                          allows_single_node_partition=True)
        partitions = part.propose_partitions()
        fused = part.fuse_partitions(partitions)
        compiled = 0
        for node in list(fused.graph.nodes):
            if node.op != "call_module":
                continue
            sub = fused.get_submodule(node.target)
            if not isinstance(sub, torch.fx.GraphModule):
                continue
            out = next(n for n in sub.graph.nodes if n.op == "output")
            single = not isinstance(out.args[0], (list, tuple))
            try:
                cg = compile_graph_module(sub, self.cfg, f"{name}_{node.target}")
            except (_native.FxhloError, DumpError) as e:
                self.fallback(f"{name}_{node.target}",
                              f"cannot be compiled, running it in eager: {e}")
                continue
            setattr(fused, node.target, _CompiledModule(cg, single))
            compiled += 1
        STATS.partitions += compiled
        self.fallback(name, msg)
        log.debug("fxhlo: %s: %d partition(s) compiled, unsupported: %s", name, compiled, ops)
        return _boxed(fused)


_DECOMPS: Optional[dict] = None


def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
               scale=None, enable_gqa=False):
    """scaled_dot_product_attention as its math form (matmuls and softmax), so that autograd
    differentiates the math and the backward graph holds ops fxhlo supports (the fused CPU
    attention kernels and their backward are not in the op table)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as the fused kernels do: True keeps a position, False masks it out
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf"))
    return torch.ops.aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
        enable_gqa=enable_gqa)[0]


class _AttentionAsMath:
    """While aot_autograd traces, ``scaled_dot_product_attention`` runs as :func:`_sdpa_math`,
    so autograd differentiates the math: calls in the Dynamo graph are retargeted, and the
    module attribute ``torch.nn.functional.scaled_dot_product_attention`` is swapped for the
    duration of the trace (it is what functions Dynamo keeps whole, such as
    ``F.multi_head_attention_forward``, call)."""

    def __init__(self, gm: torch.fx.GraphModule):
        import torch.nn.functional as F
        targets = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
        changed = False
        for n in gm.graph.nodes:
            if n.op == "call_function" and n.target in targets:
                n.target = _sdpa_math
                changed = True
        if changed:
            gm.recompile()

    def __enter__(self):
        import torch.nn.functional as F
        self.saved = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = _sdpa_math
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F
        F.scaled_dot_product_attention = self.saved
        return False


def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    """aten.var_mean.correction as aten.var.correction and aten.mean.dim (both in the op
    table; torch's own decomposition of it goes to prims)."""
    dims = list(range(x.dim())) if dim is None else dim
    var = torch.ops.aten.var.correction(x, dims, correction=correction, keepdim=keepdim)
    return var, torch.ops.aten.mean.dim(x, dims, keepdim)


def _core_aten_table() -> dict:
    """The core ATen decomposition table without its CompositeImplicitAutograd entries.

    ``core_aten_decompositions()`` (what ``run_decompositions()`` uses) is this table plus an
    entry for every CompositeImplicitAutograd op of every namespace; building those entries
    walks the whole dispatcher (~0.15 s on a first call).  They are not needed here:
    aot_autograd's tracing decomposes a CompositeImplicitAutograd op with that same kernel
    (or its Python ``py_impl``) whether or not the table names it, so the graphs are the same
    (checked on the testdata models, torchvision resnet18 and GPT-2, inference and training)."""
    try:
        from torch._decomp import _core_aten_decompositions_post_autograd
        return dict(_core_aten_decompositions_post_autograd())
    except ImportError:  # another torch: the public table
        from torch._decomp import core_aten_decompositions
        return dict(core_aten_decompositions().items())


def decompositions() -> dict:
    """The decomposition table of the backend (built once per process): the core ATen table
    (that of ``torch.export``'s ``run_decompositions()``, see :func:`_core_aten_table`) less
    the ops fxhlo compiles natively (e.g. ``native_layer_norm_backward``,
    ``embedding_dense_backward``, ``select_scatter``: fewer, larger nodes to trace and
    compile), plus torch's registered decompositions of every other op outside fxhlo's op
    table (e.g. training-mode batch norm and its backward), plus ``aten.var_mean`` as var and
    mean."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import decomposition_table
        supported = set(_native.supported_ops())

        def wanted(op) -> bool:
            return not (isinstance(op, torch._ops.OpOverload) and _op_name(op) in supported)

        table = {op: fn for op, fn in _core_aten_table().items() if wanted(op)}
        for op, fn in decomposition_table.items():
            if isinstance(op, torch._ops.OpOverload) and op not in table \
                    and op.namespace == "aten" and wanted(op) \
                    and getattr(fn, "__module__", "") == "torch._decomp.decompositions":
                table[op] = fn
        table[torch.ops.aten.var_mean.correction] = _var_mean
        from .extra_decomps import table as extra_decomps
        table.update({op: fn for op, fn in extra_decomps().items() if wanted(op)})
        _DECOMPS = table
    return _DECOMPS


def fxhlo_backend(gm: torch.fx.GraphModule, example_inputs: List[Any],
                  options: Optional[Dict[str, Any]] = None, **kwargs) -> Callable:
    """The ``torch.compile`` backend: ``torch.compile(model, backend="fxhlo", options=...)``.

    Options (all optional): ``opt_level`` (0-2, default 2), ``threads``, ``dump_dir``,
    ``cache`` (bool), ``cache_dir``, ``strict`` (raise instead of falling back to eager).
    """
    cfg, strict = parse_options(options)
    if kwargs.get("mode"):
        log.debug("fxhlo: mode=%r ignored", kwargs["mode"])
    session = Session(cfg, strict)
    name = f"g{session.id}"
    devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
    if devices - {"cpu"}:
        session.fallback(name, f"inputs on {sorted(devices - {'cpu'})}; fxhlo runs on the "
                               f"CPU only, running the graph in eager")
        return gm.forward
    if _is_dynamic(example_inputs):
        return ShapeSpecializer(gm, example_inputs, session)
    return _aot(gm, example_inputs, session)


def _aot(gm, example_inputs, session: Session) -> Callable:
    """aot_autograd with fxhlo's compilers and decomposition table.

    Calls ``aot_module_simplified`` directly rather than through
    ``torch._dynamo.backends.common.aot_autograd``: that wrapper does the same (compilers,
    ``disable`` around the backward compiler and the result) but also imports
    ``torch._inductor.debug`` (~0.1 s on a first call) for its AOT logging.  Inputs that are
    lists (which only that wrapper flattens) still go through it."""
    from torch._dynamo import disable
    from torch._dynamo.utils import counters
    from torch._functorch.aot_autograd import aot_module_simplified

    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        backend = aot_autograd(fw_compiler=session.compiler("forward"),
                               bw_compiler=session.compiler("backward"),
                               inference_compiler=session.compiler("inference"),
                               decompositions=decompositions)
        with _AttentionAsMath(gm):
            return backend(gm, example_inputs)

    bw = session.compiler("backward")

    def bw_compiler(*args, **kwargs):
        # as aot_autograd's wrapper does: Dynamo must trace neither the backward compiler nor
        # the backward program it returns
        return disable(disable(bw, reason="do not trace backward compiler function")(
            *args, **kwargs), reason="do not trace generated backwards pass")

    bw_compiler._is_wrapped_bw_compiler = True
    counters["aot_autograd"]["total"] += 1
    with _AttentionAsMath(gm):
        cg = aot_module_simplified(gm, example_inputs,
                                   fw_compiler=session.compiler("forward"),
                                   bw_compiler=bw_compiler,
                                   inference_compiler=session.compiler("inference"),
                                   decompositions=decompositions())
    counters["aot_autograd"]["ok"] += 1
    return disable(cg, reason="do not trace AOT-compiled graph")


class ShapeSpecializer:
    """Runs a Dynamo graph with symbolic shapes by compiling it once per concrete signature
    (input shapes, dtypes, strides' contiguity, requires_grad, and the values of integer
    inputs), at the first call with that signature: each specialization is an ordinary static
    aot_autograd compilation, so it is exactly as correct as ``dynamic=False``."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, session: Session):
        self.gm = gm
        self.session = session
        self.cache: Dict[tuple, Callable] = {}
        log.debug("fxhlo: g%d has symbolic shapes; compiling per concrete shape",
                  session.id)

    @staticmethod
    def _key(args) -> tuple:
        k = []
        for a in args:
            if isinstance(a, torch.Tensor):
                k.append((tuple(a.shape), a.dtype, a.device.type, a.requires_grad,
                          a.is_contiguous()))
            elif isinstance(a, (int, float, bool)):
                k.append((type(a).__name__, a))
            else:
                k.append(type(a).__name__)
        return tuple(k)

    def __call__(self, *args):
        key = self._key(args)
        fn = self.cache.get(key)
        if fn is None:
            fn = self._specialize(args)
            self.cache[key] = fn
        return fn(*args)

    def _specialize(self, args) -> Callable:
        from torch._dynamo import disable
        from torch._guards import detect_fake_mode

        @disable(reason="fxhlo compiles a specialization")
        def build():
            if detect_fake_mode(args) is not None:
                raise RuntimeError("fake tensors at run time")
            return _aot(self.gm, list(args), self.session)
        try:
            return build()
        except Exception as e:  # noqa: BLE001 - never a crash: run this shape in eager
            if self.session.strict:
                raise
            self.session.fallback(f"g{self.session.id}",
                                  f"cannot specialize the dynamic graph ({type(e).__name__}: "
                                  f"{e}); running it in eager")
            return self.gm.forward
