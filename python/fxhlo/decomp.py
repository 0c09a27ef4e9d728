"""The decompositions the torch backend traces graphs with (see :func:`decompositions`).

aot_autograd replaces each op of the table by its decomposition while it traces a Dynamo
graph, so the graphs fxhlo receives hold the ops of its op table.  Besides torch's own
tables this module holds the backend's own exact decompositions (attention as its math,
``var_mean``, ``empty_permuted``, the CPU flash attention with its ``logsumexp``), the
decompositions of ops of other libraries (:data:`LIBRARY_DECOMPOSITIONS`) and the inlining
of ``torch.library`` custom ops whose Python implementation traces
(:func:`custom_op_decompositions`).
"""

from __future__ import annotations

import logging
import math
from typing import Callable, Dict, List, Optional

import torch
import torch.fx
import torch.utils._python_dispatch

from . import _native
from .dump import _op_name

log = logging.getLogger("fxhlo")

aten = torch.ops.aten


# ------------------------------------------------------------------------------ attention

def _sdpa_math(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, *,
               scale=None, enable_gqa=False):
    """scaled_dot_product_attention as its math form (matmuls and softmax), so that autograd
    differentiates the math and the backward graph holds ops fxhlo supports (the fused CPU
    attention kernels and their backward are not in the op table)."""
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        # as the fused kernels do: True keeps a position, False masks it out
        attn_mask = torch.zeros(attn_mask.shape, dtype=query.dtype).masked_fill(
            attn_mask.logical_not(), float("-inf"))
    return aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask, dropout_p, is_causal, scale=scale,
        enable_gqa=enable_gqa)[0]


class AttentionAsMath:
    """While aot_autograd traces, ``scaled_dot_product_attention`` runs as :func:`_sdpa_math`,
    so autograd differentiates the math: calls in the Dynamo graph are retargeted, and the
    module attribute ``torch.nn.functional.scaled_dot_product_attention`` is swapped for the
    duration of the trace (it is what functions Dynamo keeps whole, such as
    ``F.multi_head_attention_forward``, call).  On exit the Dynamo graph is as it was (it is
    what runs if the backend falls back to eager)."""

    def __init__(self, gm: torch.fx.GraphModule):
        self.gm = gm

    def __enter__(self):
        import torch.nn.functional as F
        targets = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
        self.retargeted = []
        for n in self.gm.graph.nodes:
            if n.op == "call_function" and n.target in targets:
                self.retargeted.append((n, n.target))
                n.target = _sdpa_math
        if self.retargeted:
            self.gm.recompile()
        self.saved = F.scaled_dot_product_attention
        F.scaled_dot_product_attention = _sdpa_math
        return self

    def __exit__(self, *exc):
        import torch.nn.functional as F
        F.scaled_dot_product_attention = self.saved
        for n, t in self.retargeted:
            n.target = t
        if self.retargeted:
            self.gm.recompile()
        return False


def _sdpa_flash_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None,
                    scale=None):
    """``aten._scaled_dot_product_flash_attention_for_cpu`` as its math, both results.

    torch's own decomposition returns the attention weights ``[N, H, L, S]`` as its second
    result, where the kernel returns the ``logsumexp`` of the scores ``[N, H, L]`` (float32
    for half types).  Here the output is torch's math form (as in torch's decomposition, so
    the compiler sees the attention it fuses) and the logsumexp is computed as the kernel
    does: scores in the accumulation type, 0 for a fully masked row (the kernel's guard);
    grouped query attention repeats each key/value head.  When the logsumexp is not used,
    its nodes are dead and dropped."""
    torch._check(dropout_p == 0.0, lambda: "dropout probability must be zero")
    torch._check(attn_mask is None or attn_mask.dtype == query.dtype,
                 lambda: "the attention mask must have the query's dtype")
    out = aten._scaled_dot_product_attention_math.default(
        query, key, value, attn_mask=attn_mask, dropout_p=0.0, is_causal=is_causal,
        scale=scale, enable_gqa=query.size(1) != key.size(1))[0]
    acc = torch.float32 if query.dtype in (torch.float16, torch.bfloat16) else query.dtype
    q, k = query.to(acc), key.to(acc)
    if k.size(1) != q.size(1):  # grouped query attention
        k = k.repeat_interleave(q.size(1) // k.size(1), dim=1)
    s = scale if scale is not None else 1.0 / math.sqrt(query.size(-1))
    scores = torch.matmul(q, k.transpose(-2, -1)) * s
    L, S = scores.size(-2), scores.size(-1)
    if is_causal:
        keep = torch.ones(L, S, dtype=torch.bool).tril()
        scores = scores.masked_fill(keep.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask.to(acc)
    row_max = scores.amax(-1, keepdim=True)
    row_max = torch.where(row_max == float("-inf"), torch.zeros_like(row_max), row_max)
    total = torch.exp(scores - row_max).sum(-1, keepdim=True)
    total = torch.where(total == 0, torch.ones_like(total), total)
    lse = (row_max + torch.log(total)).squeeze(-1)
    return out, lse


# ----------------------------------------------------------------------------- other ops

def _var_mean(x, dim=None, *, correction=None, keepdim=False):
    """aten.var_mean.correction as aten.var.correction and aten.mean.dim (both in the op
    table; torch's own decomposition of it goes to prims)."""
    dims = list(range(x.dim())) if dim is None else dim
    var = aten.var.correction(x, dims, correction=correction, keepdim=keepdim)
    return var, aten.mean.dim(x, dims, keepdim)


def _empty_permuted(size, physical_layout, *, dtype=None, layout=None, device=None,
                    pin_memory=None):
    """``empty_permuted`` (what ``empty_like`` of a tensor decomposes to) as ``empty`` of the
    physical sizes permuted back: the same sizes and strides, uninitialized either way."""
    phys = [size[p] for p in physical_layout]
    inverse = [list(physical_layout).index(d) for d in range(len(size))]
    t = aten.empty.memory_format(phys, dtype=dtype, layout=layout, device=device,
                                 pin_memory=pin_memory)
    return aten.permute.default(t, inverse)


# --------------------------------------------------------------------- library custom ops

def _group_of_rows(offs: torch.Tensor, rows: int) -> torch.Tensor:
    """For rows sorted by group with cumulative group ends ``offs``: each row's group index,
    ``len(offs)`` for rows past the last end."""
    r = torch.arange(rows, dtype=torch.int64)
    return (offs.to(torch.int64).unsqueeze(0) <= r.unsqueeze(1)).sum(1)


def grouped_mm(input: torch.Tensor, weight: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """``transformers::grouped_mm_fallback`` (a mixture of experts' per-expert products) with
    static shapes: row ``s`` of ``input`` (rows sorted by expert, ``offs`` the cumulative row
    counts) times ``weight[e(s)]``; rows past ``offs[-1]`` are 0, as in the op.  Its Python
    implementation loops over ``offs.tolist()`` (data-dependent, so it cannot be traced);
    here every row is multiplied by every expert in one matmul ``[S, K] @ [K, E * N]`` and
    each row's own expert is gathered (E times the multiplications, one GEMM, no
    data-dependent shape)."""
    S, K = input.shape
    E, _, N = weight.shape
    g = _group_of_rows(offs, S)
    all_experts = torch.mm(input, weight.permute(1, 0, 2).reshape(K, E * N)).view(S, E, N)
    idx = g.clamp(max=E - 1).view(S, 1, 1).expand(S, 1, N)
    out = torch.gather(all_experts, 1, idx).squeeze(1)
    return torch.where((g < E).unsqueeze(1), out, torch.zeros((), dtype=out.dtype))


def grouped_mm_backward(input, weight, offs, grad_output):
    """``transformers::grouped_mm_fallback_backward`` with static shapes (see
    :func:`grouped_mm`): ``grad_input[s] = grad_output[s] @ weight[e(s)].T`` and
    ``grad_weight[e] = input[rows of e].T @ grad_output[rows of e]`` (rows of other experts
    enter the product as exact zeros)."""
    S, K = input.shape
    E, _, N = weight.shape
    g = _group_of_rows(offs, S)
    all_experts = torch.mm(grad_output, weight.permute(2, 0, 1).reshape(N, E * K)).view(S, E, K)
    idx = g.clamp(max=E - 1).view(S, 1, 1).expand(S, 1, K)
    grad_input = torch.gather(all_experts, 1, idx).squeeze(1)
    grad_input = torch.where((g < E).unsqueeze(1), grad_input,
                             torch.zeros((), dtype=grad_input.dtype))
    mine = (g.unsqueeze(1) == torch.arange(E, dtype=torch.int64)).unsqueeze(2)  # [S, E, 1]
    spread = torch.where(mine, input.unsqueeze(1), torch.zeros((), dtype=input.dtype))
    grad_weight = torch.mm(spread.reshape(S, E * K).t(), grad_output).view(E, K, N)
    return grad_input, grad_weight


# Decompositions of ops that libraries register (qualified name -> function), for ops whose
# own implementation cannot be traced; each is used when its op is registered.
LIBRARY_DECOMPOSITIONS: Dict[str, Callable] = {
    "transformers::grouped_mm_fallback": grouped_mm,
    "transformers::grouped_mm_fallback_backward": grouped_mm_backward,
}


def _library_op(qualname: str) -> Optional[torch._ops.OpOverload]:
    ns, name = qualname.split("::")
    packet = getattr(getattr(torch.ops, ns), name, None) if hasattr(torch.ops, ns) else None
    try:
        return None if packet is None else packet.default
    except AttributeError:
        return None


def _custom_op_impl(op: torch._ops.OpOverload) -> Optional[Callable]:
    """The Python implementation of a ``torch.library.custom_op`` that mutates nothing."""
    try:
        from torch._library.custom_ops import OPDEFS
    except ImportError:
        return None
    opdef = OPDEFS.get(f"{op.namespace}::{op._schema.name.split('::', 1)[-1]}")
    if opdef is None or op._schema.is_mutable:
        return None
    return getattr(opdef, "_init_fn", None)


def _traces(fn: Callable, node: torch.fx.Node) -> bool:
    """Whether ``fn`` runs on the fake values of ``node``'s arguments (Dynamo's
    ``example_value``): an implementation that reads data (``tolist()``, ``item()``,
    ``numpy()``) or fails otherwise cannot be traced into the graph."""
    from torch._subclasses.fake_tensor import FakeTensor

    def fake(a):
        return a.meta.get("example_value", a.meta.get("val")) if isinstance(a, torch.fx.Node) \
            else a
    args = torch.fx.node.map_aggregate(node.args, fake)
    kwargs = torch.fx.node.map_aggregate(node.kwargs, fake)
    flat = [x for x in torch.utils._pytree.tree_leaves((args, kwargs))]
    if any(x is None for x in flat if isinstance(x, torch.fx.Node)):
        return False
    mode = next((x.fake_mode for x in flat if isinstance(x, FakeTensor)), None)
    if mode is None:
        return False
    try:
        with mode, torch.no_grad(), _Mutations() as mutations:
            fn(*args, **kwargs)
    except Exception as e:  # noqa: BLE001 - not traceable: the op stays whole
        log.debug("fxhlo: %s cannot be inlined: %s: %s", node.target, type(e).__name__, e)
        return False
    if mutations.ops:
        # aot_autograd applies decompositions below its functionalization: the in-place ops
        # of an inlined implementation would reach the graph, which must be functional
        # (torch.nn.functional.linear_cross_entropy's chunked loop updates its sums in place)
        log.debug("fxhlo: %s cannot be inlined: it mutates (%s)", node.target,
                  ", ".join(sorted(mutations.ops)))
        return False
    return True


class _Mutations(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the mutating ops (in-place, ``out=``) that run under it."""

    def __init__(self):
        super().__init__()
        self.ops: set = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.is_mutable:
            self.ops.add(str(func))
        return func(*args, **(kwargs or {}))


def custom_op_decompositions(gm: torch.fx.GraphModule) -> Dict[Callable, Callable]:
    """Decompositions for the ops of other libraries that a Dynamo graph calls and fxhlo's op
    table lacks: those of :data:`LIBRARY_DECOMPOSITIONS` (every registered one, as backward
    ops appear only once autograd runs), and ``torch.library.custom_op`` ops whose Python
    implementation traces (see :func:`_traces`), inlined.  Ops with a
    CompositeImplicitAutograd kernel need nothing: aot_autograd traces through them."""
    table: Dict[Callable, Callable] = {}
    for qualname, fn in LIBRARY_DECOMPOSITIONS.items():
        op = _library_op(qualname)
        if op is not None:
            table[op] = fn
    supported = None
    for n in gm.graph.nodes:
        if n.op != "call_function":
            continue
        t = n.target
        if isinstance(t, torch._ops.OpOverloadPacket):  # Dynamo records packets
            ops = [getattr(t, name) for name in t.overloads()]
        elif isinstance(t, torch._ops.OpOverload):
            ops = [t]
        else:
            continue
        for op in ops:
            if op.namespace in ("aten", "prims") or op in table:
                continue
            if supported is None:
                supported = set(_native.supported_ops())
            if _op_name(op) in supported:
                continue
            impl = _custom_op_impl(op)
            if impl is not None and _traces(impl, n):
                table[op] = impl
    return table


def export_decompositions() -> dict:
    """The table for ``ExportedProgram.run_decompositions`` when the .pt2 is for fxhlo:
    torch.export's default (core ATen) table plus :data:`LIBRARY_DECOMPOSITIONS` of the
    library ops that are registered (a mixture of experts' ``transformers::grouped_mm_fallback``
    stays a custom op in the .pt2 otherwise, which ``fxhlo compile`` cannot read).  For a
    program without such ops the result is that of ``run_decompositions()``."""
    table = dict(torch.export.default_decompositions())
    for qualname, fn in LIBRARY_DECOMPOSITIONS.items():
        op = _library_op(qualname)
        if op is not None:
            table[op] = fn
    return table


# --------------------------------------------------------------------------- the table

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


# Ops whose registered decomposition must not run while aot_autograd traces: ``lift_fresh``
# (``torch.tensor(...)``, a Python list index ``x[[1, 2]]``, ``DynamicCache``'s empty tensors)
# hands a real tensor to the tracing modes, which make it a constant of the graph; torch's
# decomposition (``alias``, valid only after tracing) handed the real tensor to the fake
# tensor mode instead, which refused it.
_NEVER_DECOMPOSED = {"aten.lift.default", "aten.lift_fresh.default",
                     "aten.lift_fresh_copy.default"}


def _extra_decomposition_ok(op: torch._ops.OpOverload) -> bool:
    """Whether torch's registered decomposition of ``op`` (an op outside the core table) may
    join the backend's table: functional ops only (in-place and ``out=`` variants are left to
    functionalization), and not those of :data:`_NEVER_DECOMPOSED`."""
    return not op._schema.is_mutable and _op_name(op) not in _NEVER_DECOMPOSED


# The backend's own exact decompositions, used for ops outside fxhlo's op table.
_OWN = {
    aten.var_mean.correction: _var_mean,
    aten._scaled_dot_product_flash_attention_for_cpu.default: _sdpa_flash_cpu,
    aten.empty_permuted.default: _empty_permuted,
}

_DECOMPS: Optional[dict] = None


def decompositions() -> dict:
    """The decomposition table of the backend (built once per process): the core ATen table
    (that of ``torch.export``'s ``run_decompositions()``, see :func:`_core_aten_table`) less
    the ops fxhlo compiles natively (e.g. ``native_layer_norm_backward``,
    ``embedding_dense_backward``, ``select_scatter``: fewer, larger nodes to trace and
    compile), plus torch's registered decompositions of every other functional op outside
    fxhlo's op table (e.g. training-mode batch norm and its backward), plus the backend's own
    (:data:`_OWN`: ``var_mean`` as var and mean, ``empty_permuted``, the CPU flash attention
    with its ``logsumexp``)."""
    global _DECOMPS
    if _DECOMPS is None:
        from torch._decomp import decomposition_table
        supported = set(_native.supported_ops())

        def wanted(op) -> bool:
            return not (isinstance(op, torch._ops.OpOverload) and _op_name(op) in supported)

        table = {op: fn for op, fn in _core_aten_table().items() if wanted(op)}
        for op, fn in decomposition_table.items():
            if isinstance(op, torch._ops.OpOverload) and op not in table \
                    and op.namespace == "aten" and wanted(op) and _extra_decomposition_ok(op) \
                    and getattr(fn, "__module__", "") == "torch._decomp.decompositions":
                table[op] = fn
        table.update({op: fn for op, fn in _OWN.items() if wanted(op)})
        from .extra_decomps import table as extra_decomps
        table.update({op: fn for op, fn in extra_decomps().items() if wanted(op)})
        from .extra_decomps import stride_dependent
        table.update(stride_dependent())
        _DECOMPS = table
    return _DECOMPS


def table_for(gm: torch.fx.GraphModule) -> dict:
    """:func:`decompositions` plus :func:`custom_op_decompositions` of ``gm``."""
    extra = custom_op_decompositions(gm)
    if not extra:
        return decompositions()
    return {**decompositions(), **extra}


__all__: List[str] = ["AttentionAsMath", "decompositions", "table_for",
                      "custom_op_decompositions", "LIBRARY_DECOMPOSITIONS", "grouped_mm",
                      "grouped_mm_backward"]
