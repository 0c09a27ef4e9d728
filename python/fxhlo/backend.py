"""The ``fxhlo`` backend of ``torch.compile``.

    model = torch.compile(model, backend="fxhlo")             # registered by entry point
    model = torch.compile(model, backend="fxhlo",
                          options={"opt_level": 2, "threads": 4, "dump_dir": "/tmp/g"})

Every graph Dynamo captures goes through ``aot_autograd`` with the backend's decomposition
table (:mod:`fxhlo.decomp`: the core ATen decompositions less the ops fxhlo compiles natively,
so the graphs hold the ops of fxhlo's op table); the forward, backward and inference graphs it
produces are each compiled in-process by the Rust compiler (:mod:`fxhlo.runner`) and run on the
torch tensors without copies.  Values computed from constants alone by ops fxhlo lacks are
evaluated once at compile time.  Graphs with ops fxhlo does not support are partitioned: the
supported parts are compiled, the rest runs in eager, and one :class:`FxhloFallbackWarning`
names the ops.  Inference graphs with symbolic shapes are traced once and specialized to each
call's sizes by substitution (:mod:`fxhlo.symbolic`), each size compiled once; training
graphs with symbolic shapes are traced again per concrete input shape.

The backend never raises to the user unless the ``strict`` option is set: a failure to trace,
decompose, partition, compile or run a graph makes that graph (or part) run in eager, with one
warning naming the reason.  Steps of a compiled program that run on the reference interpreter
are reported by one :class:`FxhloInterpreterWarning` per graph; :func:`fxhlo.stats` returns
the counters.  The error checks of the linalg functions (``with_effects`` of
``aten._linalg_check_errors``) are taken out of the graph and run after the compiled program
on its ``info`` outputs (:func:`lift_error_checks`), raising eager's ``LinAlgError``.  See
docs/torch-backend.md.
"""

from __future__ import annotations

import copy
import itertools
import logging
import operator
import re
import time
import warnings
from typing import Any, Callable, Dict, List, Optional, Sequence

import torch
import torch.fx
from torch._guards import detect_fake_mode

from . import _native
from .decomp import AttentionAsMath, decompositions, table_for  # noqa: F401 (public)
from .dump import DTYPE_NAMES, _DROPPED_OPS, _op_name
from .freezing import FrozenGraph, freeze_graph, static_tensors
from .freezing import plan as freezing_plan
from .runner import (STATS, CompileConfig, GraphStats, compile_graph_module, fold_constants,
                     prepare_graph)
from .symbolic import Binder, is_inference, trace_once

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
    "freezing": "under torch.no_grad()/inference_mode(), compile parameters and buffers as "
                "constants, checked at every call (default True; fxhlo/freezing.py)",
    "symbolic": "trace an inference graph with symbolic shapes once and specialize it to each "
                "call's sizes by substitution (default True; fxhlo/symbolic.py); off: trace "
                "again per shape",
}


class FxhloFallbackWarning(UserWarning):
    """Part of a graph runs in eager because fxhlo cannot compile (or run) it."""


class FxhloInterpreterWarning(FxhloFallbackWarning):
    """Steps of a compiled program run on fxhlo's reference interpreter (correct, but slow:
    no fast kernel for them yet)."""


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
                        dump_dir=options.get("dump_dir"),
                        freezing=bool(options.get("freezing", True)),
                        symbolic=bool(options.get("symbolic", True)))
    return cfg, bool(options.get("strict", False))


def _boxed(fn: Callable) -> Callable:
    """``fn(*args)`` in aot_autograd's boxed calling convention (one list argument)."""
    def run(args):
        return fn(*args)
    run._boxed_call = True
    return run


def _boxed_list(gm: torch.fx.GraphModule) -> Callable:
    """``gm`` in the boxed convention, its results as a list (as a compiled graph gives them;
    a graph of one output returns the value itself)."""
    def run(args):
        out = gm(*args)
        return list(out) if isinstance(out, (list, tuple)) else [out]
    run._boxed_call = True
    return run


def lift_error_checks(gm: torch.fx.GraphModule) -> List[tuple]:
    """Takes the effectful error checks of the linalg ops out of ``gm``, in place, and returns
    them as ``[(api_name, is_matrix)]``.

    ``torch.linalg.inv``, ``solve``, ``cholesky``, ``lu_factor``, ``ldl_factor`` ... call their
    ``*_ex`` op and then ``aten._linalg_check_errors(info, api_name, is_matrix=...)``, which
    raises ``torch.linalg.LinAlgError`` when an ``info`` is not zero; aot_autograd wraps that
    effectful op in ``with_effects(token, op, ...)``.  Each such node is removed (its token
    result is its token input) and its ``info`` becomes an extra output of the graph, appended
    in order: :class:`_ErrorChecks` runs the check on it after the compiled program, so the
    error raised is the one eager raises, with its message.  A token input the graph then only
    passes through is returned as None."""
    checks = []
    effects = getattr(torch.ops.higher_order, "with_effects", None)
    check_op = getattr(torch.ops.aten, "_linalg_check_errors", None)
    if effects is None or check_op is None:
        return checks
    infos, tokens = [], set()
    for n in list(gm.graph.nodes):
        if not (n.op == "call_function" and n.target is effects and len(n.args) >= 4
                and n.args[1] is check_op.default):
            continue
        users = list(n.users)
        if not all(u.target is operator.getitem and u.args[1] == 0 for u in users):
            continue  # not the shape aot_autograd writes: left as it is (unsupported)
        token, info, api = n.args[0], n.args[2], n.args[3]
        tokens.add(token)
        for u in users:
            u.replace_all_uses_with(token)
            gm.graph.erase_node(u)
        gm.graph.erase_node(n)
        checks.append((api, bool(n.kwargs.get("is_matrix", n.args[4] if len(n.args) > 4
                                              else True))))
        infos.append(info)
    if checks:
        out = next(n for n in gm.graph.nodes if n.op == "output")
        res = out.args[0]
        res = list(res) if isinstance(res, (list, tuple)) else [res]
        # a token the graph now only passes through is returned as None (aot_autograd's
        # runtime wrapper passes None tokens in and drops the tokens returned)
        res = [None if isinstance(r, torch.fx.Node) and r in tokens and r.op == "placeholder"
               and set(r.users) == {out} else r for r in res]
        out.args = (tuple(res + infos),)
        gm.recompile()
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        gm.meta["fxhlo_tokens"] = [(i, n.meta.get("val")) for i, n in enumerate(phs)
                                   if n in tokens]
    return checks


class _ErrorChecks:
    """Runs a boxed program whose last outputs are the ``info`` tensors of
    :func:`lift_error_checks`' checks; checks them as ``aten._linalg_check_errors`` does
    (raising ``torch.linalg.LinAlgError`` like eager) and returns the other outputs."""

    def __init__(self, run: Callable, checks: List[tuple], tokens: List[tuple]):
        self._boxed_call = True
        self.run = run
        self.checks = checks
        # the token inputs, which aot_autograd's wrapper passes as None: (index, fake value)
        self.tokens = [(i, v.shape, v.dtype) for i, v in tokens
                       if isinstance(v, torch.Tensor)]

    def __call__(self, args):
        if self.tokens:
            args = list(args)
            for i, shape, dtype in self.tokens:
                if args[i] is None:
                    args[i] = torch.empty(shape, dtype=dtype)
        out = list(self.run(args))
        k = len(self.checks)
        infos = out[len(out) - k:]
        del out[len(out) - k:]
        for info, (api, is_matrix) in zip(infos, self.checks):
            torch.ops.aten._linalg_check_errors.default(info, api, is_matrix=is_matrix)
        return out


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


def _why(e: BaseException) -> str:
    """An exception as one short line: its type and the first line of its message."""
    lines = str(e).strip().splitlines()
    msg = lines[0] if lines else ""
    if len(msg) > 300:
        msg = msg[:297] + "..."
    return f"{type(e).__name__}: {msg}" if msg else type(e).__name__


_NODE_PREFIX = re.compile(r"node (?:\d+ )?'[^']*' \(([^()]*)\)")


def short_reason(reason: str) -> str:
    """A fallback step's reason without what names one node (``node 412 'grid_sampler_2d_4'
    (aten.grid_sampler_2d.default)`` -> ``aten.grid_sampler_2d.default``), so that the steps
    of the same op give one reason; at most 160 characters."""
    r = _NODE_PREFIX.sub(r"\1", reason)
    return r if len(r) <= 160 else r[:157] + "..."


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


class _EagerOnFailure:
    """Runs a compiled graph (boxed: one list of inputs); if it fails at run time, the failure
    is reported once and ``eager`` (the same graph in torch) runs instead, from then on.  The
    graphs are functional (aot_autograd's), so running the graph again in eager is safe."""

    def __init__(self, compiled: Callable, eager: Callable, session: "Session",
                 stats: GraphStats, what: str):
        self._boxed_call = True
        self.compiled: Optional[Callable] = compiled
        self.eager = eager
        self.session = session
        self.stats = stats
        self.what = what

    def __call__(self, args):
        if self.compiled is not None:
            try:
                return self.compiled(args)
            except torch.linalg.LinAlgError:
                raise  # the program's own error (a singular matrix...), as eager raises it
            except Exception as e:  # noqa: BLE001 - never a crash: this graph runs in eager
                if self.session.strict:
                    raise
                self.compiled = None
                self.stats.eager_partitions += 1
                self.session.fallback(self.stats, f"{self.what} failed at run time "
                                                  f"({_why(e)}); running it in eager from now on")
        return self.eager(args)


class _CompiledModule(torch.nn.Module):
    """Stands in for a fused partition: runs its compiled graph (the partition in eager if that
    fails at run time)."""

    def __init__(self, run: _EagerOnFailure, single: bool):
        super().__init__()
        self.run = run
        self.single = single

    def forward(self, *args):
        res = self.run(list(args))
        return res[0] if self.single else tuple(res)


_graph_ids = itertools.count()


class Session:
    """One Dynamo graph: compiles the forward, backward and inference graphs aot_autograd
    makes of it, and warns once per graph and reason about what falls back."""

    def __init__(self, cfg: CompileConfig, strict: bool):
        self.cfg = cfg
        self.strict = strict
        self.id = next(_graph_ids)
        self.warned: set = set()
        self._supported: Optional[set] = None
        # unique graph name -> the name it was made from (the shape specializations of a
        # dynamic graph, and recompilations, share it: their warnings are given once)
        self._base: Dict[str, str] = {}
        # the Dynamo graph's inputs that are module parameters or buffers, frozen in its
        # inference graphs (fxhlo/freezing.py): [(input index, tensor)]
        self.static: list = []

    @property
    def support(self) -> _Support:
        if self._supported is None:
            self._supported = set(_native.supported_ops())
        return _Support(self._supported)

    def graph_stats(self, name: str) -> GraphStats:
        """New counters for a graph called ``name`` (made unique: a dynamic graph's shape
        specializations and recompilations have the same name)."""
        unique, k = name, 1
        while unique in STATS.graphs:
            k += 1
            unique = f"{name}_{k}"
        gs = GraphStats(name=unique)
        STATS.graphs[unique] = gs
        self._base[unique] = name
        return gs

    def _first_time(self, gs: GraphStats, what) -> bool:
        """Whether ``what`` was not yet reported for ``gs`` (or another compilation of the
        same graph); it counts as reported from now on."""
        key = (self._base.get(gs.name, gs.name), what)
        if key in self.warned:
            return False
        self.warned.add(key)
        return True

    def fallback(self, gs: GraphStats, reason: str) -> None:
        """Reports (once per graph and reason) that (part of) graph ``gs`` runs in eager;
        raises ``fxhlo.FxhloError`` instead when strict."""
        STATS.fallback_graphs += 1
        STATS.events.append(f"{gs.name}: {reason}")
        gs.eager_reasons.append(reason)
        if self.strict:
            raise _native.FxhloError(f"fxhlo (strict): {gs.name}: {reason}")
        if self._first_time(gs, reason):
            warnings.warn(f"fxhlo: {gs.name}: {reason}", FxhloFallbackWarning, stacklevel=2)

    def compiler(self, kind: str) -> Callable:
        """An aot_autograd compiler (``fw_compiler`` etc.) for graphs of ``kind``."""
        def compile_fn(gm: torch.fx.GraphModule, example_inputs):
            name = f"g{self.id}_{kind}"
            if kind == "inference" and self.static:
                return self.compile_frozen(gm, example_inputs, name)
            return self.compile(gm, example_inputs, name)
        return compile_fn

    def compile_frozen(self, gm: torch.fx.GraphModule, example_inputs, name: str) -> Callable:
        """Compiles an inference graph with its parameters and buffers as constants
        (fxhlo/freezing.py); the graph unfrozen if none can be frozen."""
        from torch._subclasses.fake_tensor import unset_fake_temporarily
        try:
            with unset_fake_temporarily():
                frozen = freezing_plan(gm, self.static)
                if frozen:
                    original = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))
                    fgm, kept = freeze_graph(gm, frozen)
        except Exception as e:  # noqa: BLE001 - freezing is an optimization: compile unfrozen
            if self.strict:
                raise
            log.debug("fxhlo: %s not frozen: %s", name, _why(e))
            frozen = []
        if not frozen:
            return self.compile(gm, example_inputs, name)
        compiled = self.compile(fgm, [example_inputs[i] for i in kept], name, len(frozen))
        log.debug("fxhlo: %s: %d of %d inputs frozen", name, len(frozen), len(example_inputs))

        def unfreeze(reason: str) -> Callable:
            # not a fallback (the graph stays compiled), so a warning even when strict
            STATS.events.append(f"{name}: {reason}")
            warnings.warn(f"fxhlo: {name}: {reason}; compiling the graph again without "
                          f"freezing", FxhloFallbackWarning, stacklevel=2)
            return self.compile(original, example_inputs, f"{name}_unfrozen")
        return FrozenGraph(compiled, kept, frozen, unfreeze)

    def compile(self, gm: torch.fx.GraphModule, example_inputs, name: str,
                frozen: int = 0) -> Callable:
        """Compiles one ATen graph; returns a boxed callable.  Any failure (in the graph
        rewrites, the partitioner, the encoder or the compiler) runs the graph in eager, with
        a warning, unless strict.  ``frozen``: how many of its inputs were made constants."""
        gs = self.graph_stats(name)
        gs.frozen = frozen
        gs.nodes = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        # The graph's code as received: what runs in eager if anything fails. The rewrites
        # below change the graph in place, but they only add attributes and regenerate the
        # code, so this code stays valid (the partitioner works on a copy).
        eager = _boxed(gm.forward)
        try:
            # aot_autograd may call the compiler with its fake tensor mode active: constants
            # are read and folded as the real tensors they are
            from torch._subclasses.fake_tensor import unset_fake_temporarily
            with unset_fake_temporarily():
                return self._compile(gm, eager, example_inputs, gs)
        except Exception as e:  # noqa: BLE001 - never a crash: this graph runs in eager
            if self.strict:
                raise
            gs.compiled_partitions = 0
            gs.eager_partitions = 1
            self.fallback(gs, f"cannot be compiled ({_why(e)}); running it in eager")
            return eager

    def _compile(self, gm: torch.fx.GraphModule, eager: Callable, example_inputs,
                 gs: GraphStats) -> Callable:
        phs = [n.meta.get("val") for n in gm.graph.nodes if n.op == "placeholder"]
        if _is_dynamic(phs) or _is_dynamic(list(example_inputs)):
            gs.eager_partitions = 1
            self.fallback(gs, "the graph has symbolic shapes; running it in eager")
            return eager
        prepare_graph(gm)
        checks = lift_error_checks(gm)
        support = self.support
        gs.folded = fold_constants(gm, lambda n: support.why_not(n) is not None)
        bad: Dict[str, int] = {}
        for n in gm.graph.nodes:
            r = support.why_not(n)
            if r is not None:
                bad[r] = bad.get(r, 0) + 1
        if bad:
            part = self._partition(gm, gs, bad)
            return _ErrorChecks(part, checks, gm.meta.get("fxhlo_tokens", [])) if checks \
                else part
        t0 = time.perf_counter()
        cg = compile_graph_module(gm, self.cfg, gs.name)
        gs.compile_ms += (time.perf_counter() - t0) * 1e3
        gs.compiled_partitions = 1
        self._count_steps(gs, [cg])
        cg.stats = gs
        run = _ErrorChecks(cg, checks, gm.meta.get("fxhlo_tokens", [])) if checks else cg
        return _EagerOnFailure(run, eager, self, gs, "the compiled graph")

    def _partition(self, gm: torch.fx.GraphModule, gs: GraphStats,
                   bad: Dict[str, int]) -> Callable:
        from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner

        ops = ", ".join(f"{k} ({v} node{'s' if v > 1 else ''})" for k, v in sorted(bad.items()))
        msg = (f"op(s) not supported by fxhlo yet, run in eager: {ops}; the other parts of the "
               f"graph are compiled")
        gs.eager_ops = dict(sorted(bad.items()))
        if self.strict:
            self.fallback(gs, msg)
        gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph))  # fused in place
        part = CapabilityBasedPartitioner(gm, _operator_support(self.support),
                                          allows_single_node_partition=True)
        partitions = part.propose_partitions()
        fused = part.fuse_partitions(partitions)
        compiled = []
        for node in list(fused.graph.nodes):
            if node.op != "call_module":
                continue
            sub = fused.get_submodule(node.target)
            if not isinstance(sub, torch.fx.GraphModule):
                continue
            out = next(n for n in sub.graph.nodes if n.op == "output")
            single = not isinstance(out.args[0], (list, tuple))
            what = f"partition {node.target}"
            try:
                t0 = time.perf_counter()
                cg = compile_graph_module(sub, self.cfg, f"{gs.name}_{node.target}")
                gs.compile_ms += (time.perf_counter() - t0) * 1e3
            except Exception as e:  # noqa: BLE001 - this partition runs in eager
                if self.strict:
                    raise
                gs.eager_partitions += 1
                self.fallback(gs, f"{what} cannot be compiled ({_why(e)}); running it in eager")
                continue
            cg.stats = gs
            run = _EagerOnFailure(cg, _boxed_list(sub), self, gs, what)
            setattr(fused, node.target, _CompiledModule(run, single))
            compiled.append(cg)
        gs.compiled_partitions = len(compiled)
        gs.eager_partitions += _eager_groups(fused, self.support)
        STATS.partitions += len(compiled)
        self._count_steps(gs, compiled)
        self.fallback(gs, msg)
        log.debug("fxhlo: %s: %d partition(s) compiled, unsupported: %s", gs.name,
                  len(compiled), ops)
        return _boxed(fused)

    def _count_steps(self, gs: GraphStats, compiled: list) -> None:
        """Adds the steps of the graph's compiled programs to ``gs`` and warns once if some
        run on the reference interpreter."""
        for cg in compiled:
            steps, fallbacks = cg.steps()
            gs.steps += steps
            gs.fallback_steps += len(fallbacks)
            for _, _, reason in fallbacks:
                r = short_reason(reason)
                gs.fallback_reasons[r] = gs.fallback_reasons.get(r, 0) + 1
        if gs.fallback_steps and self._first_time(gs, tuple(sorted(gs.fallback_reasons))):
            reasons = sorted(gs.fallback_reasons.items(), key=lambda kv: (-kv[1], kv[0]))
            listed = "; ".join(f"{r} ({n} step{'s' if n > 1 else ''})" for r, n in reasons[:5])
            if len(reasons) > 5:
                listed += f"; and {len(reasons) - 5} more reason(s)"
            warnings.warn(f"fxhlo: {gs.name}: {gs.fallback_steps} of {gs.steps} steps run on "
                          f"the reference interpreter (slow, no fast kernel for them yet): "
                          f"{listed}", FxhloInterpreterWarning, stacklevel=3)


def _eager_groups(fused: torch.fx.GraphModule, support: _Support) -> int:
    """Connected groups of the nodes that run in eager in a partitioned graph."""
    eager = [n for n in fused.graph.nodes if n.op == "call_function"
             and not (n.target is operator.getitem and isinstance(n.args[0], torch.fx.Node)
                      and n.args[0].op == "call_module")
             and support.why_not(n) is not None]
    parent = {n: n for n in eager}

    def root(n):
        while parent[n] is not n:
            parent[n] = parent[parent[n]]
            n = parent[n]
        return n
    for n in eager:
        for a in n.all_input_nodes:
            if a in parent:
                parent[root(a)] = root(n)
    return len({root(n) for n in eager})


def fxhlo_backend(gm: torch.fx.GraphModule, example_inputs: List[Any],
                  options: Optional[Dict[str, Any]] = None, **kwargs) -> Callable:
    """The ``torch.compile`` backend: ``torch.compile(model, backend="fxhlo", options=...)``.

    Options (all optional): ``opt_level`` (0-2, default 2), ``threads``, ``dump_dir``,
    ``cache`` (bool), ``cache_dir``, ``strict`` (raise instead of falling back to eager).
    A bad option is an error; any other failure runs the graph in eager, with a warning,
    unless ``strict``.
    """
    cfg, strict = parse_options(options)
    if kwargs.get("mode"):
        log.debug("fxhlo: mode=%r ignored", kwargs["mode"])
    session = Session(cfg, strict)
    try:
        devices = {x.device.type for x in example_inputs if isinstance(x, torch.Tensor)}
        if devices - {"cpu"}:
            gs = session.graph_stats(f"g{session.id}")
            gs.eager_partitions = 1
            session.fallback(gs, f"inputs on {sorted(devices - {'cpu'})}; fxhlo runs on the "
                                 f"CPU only, running the graph in eager")
            return gm.forward
        if _is_dynamic(example_inputs):
            return _dynamic(gm, example_inputs, session)
        if cfg.freezing:
            session.static = static_tensors(gm, example_inputs)
        return _aot(gm, example_inputs, session)
    except Exception as e:  # noqa: BLE001 - never a crash: this graph runs in eager
        if strict or _restarts_dynamo(e):
            raise
        gs = session.graph_stats(f"g{session.id}")
        gs.eager_partitions = 1
        session.fallback(gs, f"cannot be traced to ATen ({_why(e)}); running it in eager")
        return gm.forward


def _dynamic(gm, example_inputs, session: Session) -> Callable:
    """A Dynamo graph with symbolic shapes: an inference graph is traced once and specialized
    to each call's sizes (fxhlo/symbolic.py); training graphs, and any graph whose symbolic
    trace fails, are traced again per concrete shape (``ShapeSpecializer``)."""
    spec = ShapeSpecializer(gm, example_inputs, session)
    if not (session.cfg.symbolic and is_inference(example_inputs)):
        return spec
    return _trace_symbolic(gm, example_inputs, session) or spec


def _restarts_dynamo(e: Exception) -> bool:
    """Whether ``e`` asks Dynamo to analyse the frame again: aot_autograd raises this for a
    float input read with ``.item()`` (``dynamic=True`` passes a module's float attributes
    so); Dynamo then specializes the float and hands the backend a graph free of it (as it
    does for Inductor)."""
    return type(e).__name__ == "TensorifyScalarRestartAnalysis"


def _trace_symbolic(gm, example_inputs, session: Session) -> Optional[Callable]:
    """aot_autograd over the symbolic graph once, its inference graph bound to each call's
    sizes by a ``Binder``; None if the trace fails (the caller traces per shape instead)."""
    name = f"g{session.id}_inference"
    compile_static = session.compiler("inference")
    shape_env = getattr(detect_fake_mode(example_inputs), "shape_env", None)

    def fallback(args, why: str) -> Callable:
        gs = session.graph_stats(name)
        gs.eager_partitions = 1
        session.fallback(gs, f"cannot specialize the symbolic graph to this call ({why}); "
                             f"running it in eager")
        return _boxed(binder.gm.forward)

    def on_new_size() -> None:
        STATS.specializations += 1

    binder: Optional[Binder] = None

    def make_binder(agm: torch.fx.GraphModule) -> Binder:
        nonlocal binder
        binder = Binder(agm, compile_static, fallback, on_new_size, shape_env)
        return binder
    try:
        cg = trace_once(gm, example_inputs, _aot_with(session), make_binder)
    except Exception as e:  # noqa: BLE001 - the per-shape path is as correct, only slower
        if _restarts_dynamo(e):
            raise
        log.debug("fxhlo: g%d: symbolic trace failed (%s); tracing per shape", session.id,
                  _why(e))
        return None
    STATS.symbolic_graphs += 1
    return cg


def _aot_with(session: Session) -> Callable:
    def aot(gm, example_inputs, inference_compiler=None):
        return _aot(gm, example_inputs, session, inference_compiler)
    return aot


def _aot(gm, example_inputs, session: Session,
         inference_compiler: Optional[Callable] = None) -> Callable:
    """aot_autograd with fxhlo's compilers and decomposition table.

    Calls ``aot_module_simplified`` directly rather than through
    ``torch._dynamo.backends.common.aot_autograd``: that wrapper does the same (compilers,
    ``disable`` around the backward compiler and the result) but also imports
    ``torch._inductor.debug`` (~0.1 s on a first call) for its AOT logging.  Inputs that are
    lists (which only that wrapper flattens) still go through it."""
    from torch._dynamo import disable
    from torch._dynamo.utils import counters
    from torch._functorch.aot_autograd import aot_module_simplified

    table = table_for(gm)
    inference = inference_compiler or session.compiler("inference")
    if any(isinstance(x, (list, tuple, dict)) for x in example_inputs):
        from torch._dynamo.backends.common import aot_autograd
        backend = aot_autograd(fw_compiler=session.compiler("forward"),
                               bw_compiler=session.compiler("backward"),
                               inference_compiler=inference,
                               decompositions=table)
        with AttentionAsMath(gm):
            return backend(gm, example_inputs)

    bw = session.compiler("backward")

    def bw_compiler(*args, **kwargs):
        # as aot_autograd's wrapper does: Dynamo must trace neither the backward compiler nor
        # the backward program it returns
        return disable(disable(bw, reason="do not trace backward compiler function")(
            *args, **kwargs), reason="do not trace generated backwards pass")

    bw_compiler._is_wrapped_bw_compiler = True
    counters["aot_autograd"]["total"] += 1
    with AttentionAsMath(gm):
        cg = aot_module_simplified(gm, example_inputs,
                                   fw_compiler=session.compiler("forward"),
                                   bw_compiler=bw_compiler,
                                   inference_compiler=inference,
                                   decompositions=table)
    counters["aot_autograd"]["ok"] += 1
    return disable(cg, reason="do not trace AOT-compiled graph")


def _is_item(n: torch.fx.Node) -> bool:
    return ((n.op == "call_method" and n.target == "item")
            or (n.op == "call_function" and n.target in (torch.ops.aten._local_scalar_dense.default,
                                                        torch.ops.aten.item.default)))


class ShapeSpecializer:
    """Runs a Dynamo graph with symbolic shapes by compiling it once per concrete signature
    (input shapes, dtypes, strides' contiguity, requires_grad, and the values of integer
    inputs), at the first call with that signature: each specialization is an ordinary static
    aot_autograd compilation, so it is exactly as correct as ``dynamic=False``."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs, session: Session):
        self.gm = gm
        self.session = session
        self.cache: Dict[tuple, Callable] = {}
        # inputs that are numbers wrapped in 0-d tensors and read with .item() (Dynamo passes
        # a module's float attributes this way with dynamic=True, e.g. LayerNorm's eps):
        # their values are part of the signature and become constants of the specialization
        # (tracing .item() of a fake tensor is data-dependent: the graph ran in eager)
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self.items = {i: [u for u in n.users] for i, n in enumerate(phs)
                      if n.users and all(_is_item(u) for u in n.users)}
        log.debug("fxhlo: g%d has symbolic shapes; compiling per concrete shape",
                  session.id)

    def _key(self, args) -> tuple:
        k = []
        for i, a in enumerate(args):
            if i in self.items and isinstance(a, torch.Tensor) and a.numel() == 1:
                k.append(("item", a.dtype, a.item()))
            elif isinstance(a, torch.Tensor):
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

    def _with_items(self, args) -> torch.fx.GraphModule:
        """The graph with the ``.item()`` of each number input replaced by its value in
        ``args`` (the graph itself when it reads none)."""
        if not self.items:
            return self.gm
        gm = torch.fx.GraphModule(self.gm, copy.deepcopy(self.gm.graph))
        phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
        for i in self.items:
            value = args[i].item()
            for item in list(phs[i].users):
                for u in list(item.users):
                    u.args = torch.fx.node.map_arg(u.args, lambda a: value if a is item else a)
                    u.kwargs = torch.fx.node.map_arg(u.kwargs,
                                                     lambda a: value if a is item else a)
                gm.graph.erase_node(item)
        gm.recompile()
        return gm

    def _specialize(self, args) -> Callable:
        from torch._dynamo import disable
        from torch._guards import detect_fake_mode

        @disable(reason="fxhlo compiles a specialization")
        def build():
            if detect_fake_mode(args) is not None:
                raise RuntimeError("fake tensors at run time")
            return _aot(self._with_items(args), list(args), self.session)
        try:
            return build()
        except Exception as e:  # noqa: BLE001 - never a crash: run this shape in eager
            if self.session.strict:
                raise
            gs = self.session.graph_stats(f"g{self.session.id}")
            gs.eager_partitions = 1
            self.session.fallback(gs, f"cannot specialize the dynamic graph ({_why(e)}); "
                                      f"running it in eager")
            return self.gm.forward
