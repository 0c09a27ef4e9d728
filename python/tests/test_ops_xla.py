"""Op sweep: every lowered core-ATen op, checked by code we did not write.

For each case below: build a torch module calling the op, dump it with ``fxhlo.dump.dump``,
lower it with ``fxhlo lower``, parse and verify the module with jaxlib's StableHLO bindings,
execute it with XLA on CPU and compare with torch eager.  Each case sweeps at least two shapes
(broadcasting, negative dims, permutes, empty dims where legal) and every dtype among
f32, bf16, f16, i64, i32, bool that eager accepts for it.  To keep CI fast, all (shape, dtype)
variants of one case go into one graph (one export, one lowering, one XLA compile); a graph that
fails to lower is retried per variant so failures are attributed.

Tolerances (``fxhlo.testing.xla.TOLERANCE``): f32 rtol 1e-4 / atol 1e-5, f16 1e-2 / 1e-3,
bf16 2e-2 / 1e-2 (PyTorch computes half types in f32 and rounds once; so do we); integers and
bools must be equal.  Random ops (``rand``, ``randn``, ``randperm``, ``native_dropout``) produce
XLA's numbers, not torch's: they are checked for shape, dtype and distribution.

    PYTHONPATH=python python python/tests/test_ops_xla.py [SUBSTRING ...]
    PYTHONPATH=python python -m pytest python/tests/test_ops_xla.py -q

prints ``op sweep: ...`` with per-dtype pass counts and the ops covered.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import traceback
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, List, Optional, Sequence

import numpy as np
import torch

from fxhlo import dump as fxdump  # noqa: E402
from fxhlo.testing import xla  # noqa: E402

aten = torch.ops.aten
F32, BF16, F16, I64, I32, BOOL = (torch.float32, torch.bfloat16, torch.float16, torch.int64,
                                  torch.int32, torch.bool)
ALL = (F32, BF16, F16, I64, I32, BOOL)
FLOATS = (F32, BF16, F16)
NAMES = {F32: "f32", BF16: "bf16", F16: "f16", I64: "i64", I32: "i32", BOOL: "bool"}


# ------------------------------------------------------------------------------- inputs

def make(shape, dtype, kind, gen):
    """A test tensor: ``kind`` picks the value range ('any', 'pos', 'unit', 'ge1', 'nz',
    'small', 'special', 'idx:N', 'mask', 'perm:N')."""
    if kind.startswith("idx:"):
        n = int(kind[4:])
        return torch.randint(0, n, shape, generator=gen, dtype=torch.int64)
    if kind.startswith("nidx:"):  # negative indices allowed
        n = int(kind[5:])
        return torch.randint(-n, n, shape, generator=gen, dtype=torch.int64)
    if kind.startswith("perm:"):  # unique indices along the last dim
        n = int(kind[5:])
        lead = int(np.prod(shape[:-1])) if len(shape) > 1 else 1
        rows = [torch.randperm(n, generator=gen)[: shape[-1]] for _ in range(lead)]
        return torch.stack(rows).reshape(shape) if rows else torch.zeros(shape, dtype=torch.int64)
    if kind == "mask" or dtype == BOOL:
        return torch.rand(shape, generator=gen) > 0.5
    if dtype.is_floating_point:
        if kind == "pos":
            t = torch.rand(shape, generator=gen) * 1.5 + 0.5
        elif kind == "unit":
            t = torch.rand(shape, generator=gen) * 1.8 - 0.9
        elif kind == "ge1":
            t = torch.rand(shape, generator=gen) * 2 + 1.05
        elif kind == "nz":
            t = (torch.rand(shape, generator=gen) + 0.5) * torch.where(
                torch.rand(shape, generator=gen) > 0.5, 1.0, -1.0)
        elif kind == "small":
            t = torch.rand(shape, generator=gen) * 2 - 1
        elif kind == "special":
            t = torch.randn(shape, generator=gen)
            flat = t.view(-1)
            for i, v in enumerate([math.inf, -math.inf, math.nan]):
                if i < flat.numel():
                    flat[i * 3 % max(flat.numel(), 1)] = v
        else:
            t = torch.randn(shape, generator=gen)
        return t.to(dtype)
    lo, hi = {"pos": (1, 6), "nz": (1, 6), "ge1": (1, 6), "small": (0, 4)}.get(kind, (-5, 6))
    t = torch.randint(lo, hi, shape, generator=gen)
    if kind == "nz":
        t = t * torch.where(torch.rand(shape, generator=gen) > 0.5, 1, -1)
    return t.to(dtype)


@dataclass
class Case:
    """One op (or a few overloads) under test.

    ``fn(*tensors)`` calls the op; ``shapes`` lists shape configurations (a tuple of input
    shapes each); ``kinds`` gives each input's value kind; the swept dtype applies to inputs
    whose kind is not an index or mask kind.
    """
    name: str
    ops: Sequence[str]
    fn: Callable
    shapes: Sequence[tuple]
    kinds: Sequence[str] = ("any",)
    dtypes: Sequence[torch.dtype] = ALL
    check: str = "close"
    tol: Optional[dict] = None
    raw: bool = False


CASES: List[Case] = []


def case(name, ops, fn, shapes, kinds=("any",), dtypes=ALL, check="close", tol=None, raw=False):
    """Registers a case; ``raw`` exports without the core-ATen decompositions, for overloads
    that ``run_decompositions`` rewrites into others (the graph is still written by
    ``fxhlo.dump``'s converter)."""
    if isinstance(ops, str):
        ops = [ops]
    CASES.append(Case(name, ops, fn, shapes, kinds, dtypes, check, tol, raw))


S2 = [((3, 4),), ((2, 0, 3),), ((),)]
B2 = [((3, 4), (3, 4)), ((2, 1, 4), (3, 1)), ((0, 4), (4,))]

# ---------------------------------------------------------------- unary
for op, f, kind in [
    ("abs", torch.abs, "any"), ("acos", torch.acos, "unit"), ("acosh", torch.acosh, "ge1"),
    ("asin", torch.asin, "unit"), ("asinh", torch.asinh, "any"), ("atan", torch.atan, "any"),
    ("atanh", torch.atanh, "unit"), ("ceil", torch.ceil, "any"), ("cos", torch.cos, "any"),
    ("cosh", torch.cosh, "small"), ("erf", torch.erf, "any"), ("exp", torch.exp, "small"),
    ("expm1", torch.expm1, "small"), ("floor", torch.floor, "any"), ("log", torch.log, "pos"),
    ("log10", torch.log10, "pos"), ("log1p", torch.log1p, "pos"), ("log2", torch.log2, "pos"),
    ("neg", torch.neg, "any"), ("reciprocal", torch.reciprocal, "pos"),
    ("relu", torch.relu, "any"), ("round", torch.round, "any"), ("rsqrt", torch.rsqrt, "pos"),
    ("sigmoid", torch.sigmoid, "any"), ("sign", torch.sign, "any"), ("sin", torch.sin, "any"),
    ("sinh", torch.sinh, "small"), ("sqrt", torch.sqrt, "pos"), ("tan", torch.tan, "unit"),
    ("tanh", torch.tanh, "any"), ("trunc", torch.trunc, "any"),
    ("bitwise_not", torch.bitwise_not, "any"), ("logical_not", torch.logical_not, "any"),
    ("isnan", torch.isnan, "special"), ("isinf", torch.isinf, "special"),
]:
    case(op, f"aten.{op}.default", f, S2, (kind,))

case("round_half", "aten.round.default", lambda x: torch.round(x * 0 + torch.tensor(
    [0.5, 1.5, 2.5, -0.5, -1.5], dtype=x.dtype)), [((5,),), ((1, 5),)], dtypes=FLOATS)

# ---------------------------------------------------------------- binary
for op, f, kinds in [
    ("add.Tensor", torch.add, ("any", "any")),
    ("sub.Tensor", torch.sub, ("any", "any")),
    ("mul.Tensor", torch.mul, ("any", "any")),
    ("div.Tensor", torch.div, ("any", "nz")),
    ("maximum.default", torch.maximum, ("any", "any")),
    ("minimum.default", torch.minimum, ("any", "any")),
    ("pow.Tensor_Tensor", torch.pow, ("pos", "small")),
    ("atan2.default", torch.atan2, ("any", "any")),
    ("fmod.Tensor", torch.fmod, ("any", "nz")),
    ("remainder.Tensor", torch.remainder, ("any", "nz")),
    ("bitwise_and.Tensor", torch.bitwise_and, ("any", "any")),
    ("bitwise_or.Tensor", torch.bitwise_or, ("any", "any")),
    ("bitwise_xor.Tensor", torch.bitwise_xor, ("any", "any")),
    ("logical_and.default", torch.logical_and, ("any", "any")),
    ("logical_or.default", torch.logical_or, ("any", "any")),
    ("logical_xor.default", torch.logical_xor, ("any", "any")),
    ("eq.Tensor", torch.eq, ("small", "small")),
    ("ne.Tensor", torch.ne, ("small", "small")),
    ("lt.Tensor", torch.lt, ("any", "any")),
    ("le.Tensor", torch.le, ("small", "small")),
    ("gt.Tensor", torch.gt, ("any", "any")),
    ("ge.Tensor", torch.ge, ("small", "small")),
]:
    case(op, f"aten.{op}", f, B2, kinds)

case("add.Tensor alpha", "aten.add.Tensor", lambda a, b: torch.add(a, b, alpha=2), B2[:2],
     dtypes=(F32, BF16, F16, I64, I32))
case("sub.Tensor alpha", "aten.sub.Tensor", lambda a, b: torch.sub(a, b, alpha=3), B2[:2],
     dtypes=(F32, BF16, F16, I64, I32))
case("div.Tensor_mode trunc", "aten.div.Tensor_mode",
     lambda a, b: torch.div(a, b, rounding_mode="trunc"), B2, ("any", "nz"))
case("div.Tensor_mode floor", "aten.div.Tensor_mode",
     lambda a, b: torch.div(a, b, rounding_mode="floor"), B2, ("any", "nz"))
case("add mixed dtypes", "aten.add.Tensor",
     lambda a: (a + a.to(torch.int64), a.to(torch.int32) * a.to(torch.bool),
                a.to(torch.float16) + a.to(torch.bfloat16), a.to(torch.int64) / 2),
     [((3, 4),), ((5,),)], dtypes=(F32,))

for op, f, kind in [
        ("pow.Tensor_Scalar", lambda x: x ** 2, "any"),
    ("pow.Tensor_Scalar f", lambda x: x ** 1.7, "pos"),
    ("pow.Tensor_Scalar 3", lambda x: x ** 3, "any"),
    ("pow.Scalar", lambda x: 2 ** x, "small"),
    ("fmod.Scalar", lambda x: torch.fmod(x, 3), "any"),
    ("remainder.Scalar", lambda x: x % 3, "any"),
    ("bitwise_and.Scalar", lambda x: x & 3, "any"),
    ("bitwise_or.Scalar", lambda x: x | 2, "any"),
    ("bitwise_xor.Scalar", lambda x: x ^ 5, "any"),
    ("eq.Scalar", lambda x: x == 1, "small"), ("ne.Scalar", lambda x: x != 1, "small"),
    ("lt.Scalar", lambda x: x < 0.5, "any"), ("le.Scalar", lambda x: x <= 1, "small"),
    ("gt.Scalar", lambda x: x > 0, "any"), ("ge.Scalar", lambda x: x >= 2, "small"),
]:
    name = op.split(" ")[0]
    case(op, f"aten.{name}", f, S2, (kind,))

for op, f, kind in [
    ("add.Scalar", lambda x: (aten.add.Scalar(x, 2), aten.add.Scalar(x, 1.5, alpha=2)), "any"),
    ("sub.Scalar", lambda x: aten.sub.Scalar(x, 3), "any"),
    ("mul.Scalar", lambda x: (aten.mul.Scalar(x, 3), aten.mul.Scalar(x, 0.5)), "any"),
    ("div.Scalar", lambda x: (aten.div.Scalar(x, 4), aten.div.Scalar(x, -0.5)), "any"),
    ("div.Scalar_mode", lambda x: (aten.div.Scalar_mode(x, 3, rounding_mode="floor"),
                                   aten.div.Scalar_mode(x, -2, rounding_mode="trunc")), "any"),
]:
    case(op, f"aten.{op}", f, S2, (kind,), raw=True)

case("where.self", "aten.where.self", lambda c, a, b: torch.where(c, a, b),
     [((3, 4), (3, 4), (3, 4)), ((2, 1, 4), (3, 1), (4,)), ((0, 2), (0, 2), (2,))],
     ("mask", "any", "any"))
case("clamp", "aten.clamp.default", lambda x: torch.clamp(x, -1, 2), S2)
case("clamp min", "aten.clamp.default", lambda x: torch.clamp(x, min=0.5), S2[:2])
case("clamp.Tensor", "aten.clamp.Tensor", lambda x, lo, hi: torch.clamp(x, lo, hi),
     [((3, 4), (3, 4), (4,)), ((2, 3), (1,), (2, 1))], ("any", "small", "pos"))
case("hardtanh", "aten.hardtanh.default", lambda x: torch.nn.functional.hardtanh(x, -0.5, 1.0),
     S2, dtypes=FLOATS)
case("gelu", "aten.gelu.default", torch.nn.functional.gelu, S2, dtypes=FLOATS)
case("gelu tanh", "aten.gelu.default",
     lambda x: torch.nn.functional.gelu(x, approximate="tanh"), S2, dtypes=FLOATS)
case("elu", "aten.elu.default", lambda x: torch.nn.functional.elu(x, 0.7), S2, dtypes=FLOATS)
case("leaky_relu", "aten.leaky_relu.default",
     lambda x: torch.nn.functional.leaky_relu(x, 0.1), S2, dtypes=FLOATS)

# ---------------------------------------------------------------- copies, conversion
case("_to_copy", "aten._to_copy.default",
     lambda x: tuple(x.to(d) for d in ALL), [((3, 4),), ((2, 0),), ((),)], ("small",))
case("clone", "aten.clone.default", lambda x: aten.clone.default(x), S2)
case("alias", "aten.alias.default", lambda x: aten.alias.default(x) + 0, S2[:2],
     dtypes=(F32, I64, I32))
case("copy", "aten.copy.default", lambda x, y: aten.copy.default(x, y),
     [((3, 4), (4,)), ((2, 3), (2, 3))])

# ---------------------------------------------------------------- creation
case("full", "aten.full.default",
     lambda x: tuple(torch.full((2, 3), 3 if d != BOOL else True, dtype=d) for d in ALL)
     + (torch.full((0, 2), 1.5),), [((1,),), ((2,),)], dtypes=(F32,))
case("full_like", "aten.full_like.default", lambda x: torch.full_like(x, 2), S2)
case("fill.Scalar", "aten.fill.Scalar", lambda x: aten.fill.Scalar(x, 1), S2, raw=True)
case("scalar_tensor", "aten.scalar_tensor.default",
     lambda x: tuple(aten.scalar_tensor.default(2, dtype=d) for d in ALL), [((1,),), ((3,),)],
     dtypes=(F32,))
case("arange", "aten.arange.start_step",
     lambda x: (torch.arange(2, 11, 3), torch.arange(0.5, 3.0, 0.25), torch.arange(5, dtype=d0(x)),
                torch.arange(-3, 4, dtype=torch.float16)), [((1,),), ((2,),)],
     dtypes=(F32, I64, I32))
case("empty", ["aten.empty.memory_format"],
     lambda x: (torch.empty((2, 3), dtype=x.dtype), torch.empty((0,), dtype=x.dtype)),
     [((1,),), ((2, 2),)], check="shape")
case("empty_strided", "aten.empty_strided.default",
     lambda x: aten.empty_strided.default((2, 3), (3, 1), dtype=x.dtype), [((1,),), ((3,),)],
     check="shape")
case("rand", "aten.rand.default", lambda x: torch.rand((64, 64), dtype=x.dtype),
     [((1,),), ((2,),)], dtypes=FLOATS, check="uniform")
case("randn", "aten.randn.default", lambda x: torch.randn((64, 64), dtype=x.dtype),
     [((1,),), ((2,),)], dtypes=FLOATS, check="normal")
case("randperm", "aten.randperm.default", lambda x: torch.randperm(50, dtype=torch.int64), [((1,),), ((2,),)],
     dtypes=(F32,), check="perm")
case("native_dropout", "aten.native_dropout.default",
     lambda x: aten.native_dropout.default(x, 0.25, True), [((64, 64),), ((4096,),)],
     dtypes=FLOATS, check="dropout")


def d0(x):
    return x.dtype


# ---------------------------------------------------------------- reductions
R2 = [((3, 4, 5),), ((2, 0, 3),)]
case("sum.dim_IntList", "aten.sum.dim_IntList",
     lambda x: (x.sum(1), x.sum((-1, 0), keepdim=True), x.sum()), R2 + [((),)])
case("sum dtype", "aten.sum.dim_IntList", lambda x: x.sum(1, dtype=torch.float32), R2)
case("mean.dim", "aten.mean.dim", lambda x: (x.mean(1), x.mean((-1, 0), keepdim=True)), R2,
     dtypes=FLOATS)
case("mean.default", "aten.mean.default", lambda x: aten.mean.default(x), R2, dtypes=FLOATS)
case("prod", ["aten.prod.default", "aten.prod.dim_int"],
     lambda x: (torch.prod(x), torch.prod(x, -1), torch.prod(x, 0, keepdim=True)),
     [((2, 3),), ((3, 1, 2),)], ("small",))
case("amax", "aten.amax.default", lambda x: (torch.amax(x, 1), torch.amax(x, (0, -1), True)),
     [((3, 4, 5),), ((2, 3, 1),)])
case("amin", "aten.amin.default", lambda x: (torch.amin(x, -1), torch.amin(x, (0, 2))),
     [((3, 4, 5),), ((2, 3, 1),)])
case("any", ["aten.any.default", "aten.any.dim", "aten.any.dims"],
     lambda x: (torch.any(x), torch.any(x, 1), aten.any.dims(x, [0, 2], True)), R2)
case("argmax", "aten.argmax.default", lambda x: (torch.argmax(x, 1), torch.argmax(x),
                                                  torch.argmax(x, -1, keepdim=True)),
     [((3, 4, 5),), ((6, 2, 1),)], ("small",), dtypes=(F32, BF16, F16, I64, I32))
case("argmin", "aten.argmin.default", lambda x: (torch.argmin(x, 0), torch.argmin(x)),
     [((3, 4, 5),), ((6, 2, 1),)], ("small",), dtypes=(F32, BF16, F16, I64, I32))
case("max.dim", "aten.max.dim", lambda x: torch.max(x, 1), [((3, 4, 5),), ((6, 2),)], ("small",))
case("min.dim", "aten.min.dim", lambda x: torch.min(x, -1, keepdim=True),
     [((3, 4, 5),), ((6, 2),)], ("small",))
case("var.correction", "aten.var.correction",
     lambda x: (torch.var(x, 1), torch.var(x, (0, 2), correction=0, keepdim=True), torch.var(x)),
     [((3, 4, 5),), ((2, 6, 1),)], dtypes=FLOATS)
case("var.dim", "aten.var.dim", lambda x: aten.var.dim(x, [1], False, True),
     [((3, 4, 5),), ((2, 6),)], dtypes=FLOATS, raw=True)
case("cumsum", "aten.cumsum.default", lambda x: (torch.cumsum(x, 1), torch.cumsum(x, -1)),
     [((3, 4),), ((2, 5, 0),)], ("small",))
case("cumsum dtype", "aten.cumsum.default", lambda x: torch.cumsum(x, 0, dtype=torch.float32),
     [((6,),), ((3, 2),)], ("small",))

# ---------------------------------------------------------------- shapes
case("view", "aten.view.default", lambda x: (x.view(4, 3), x.view(-1), x.view(2, 1, 6)),
     [((3, 4),), ((12,),)])
case("view empty", "aten.view.default", lambda x: x.view(0, 4), [((4, 0),), ((2, 0, 2),)])
case("permute", "aten.permute.default", lambda x: x.permute(2, 0, 1),
     [((2, 3, 4),), ((1, 0, 3),)])
case("permute neg", "aten.permute.default", lambda x: x.permute(-1, 0), [((2, 3),), ((5, 1),)])
case("expand", "aten.expand.default", lambda x: x.expand(2, 3, 4),
     [((3, 1),), ((1, 4),), ((4,),)])
case("unsqueeze", "aten.unsqueeze.default", lambda x: (x.unsqueeze(0), x.unsqueeze(-1)), S2)
case("squeeze", ["aten.squeeze.dim", "aten.squeeze.dims"],
     lambda x: (aten.squeeze.dim(x, 1), aten.squeeze.dims(x, [0, -1])),
     [((1, 1, 3),), ((2, 1, 1),)], raw=True)
case("slice", "aten.slice.Tensor", lambda x: (x[1:3], x[:, ::2], x[:, -3:], x[5:]),
     [((4, 6),), ((3, 5),)])
case("select", "aten.select.int", lambda x: (x[1], x[:, -1]), [((3, 4),), ((2, 5, 2),)])
case("cat", "aten.cat.default", lambda a, b: (torch.cat([a, b, a], 1), torch.cat([a, b], -1)),
     [((2, 3), (2, 1)), ((2, 0), (2, 4))])
case("cat promote", "aten.cat.default", lambda a: torch.cat([a, a.to(torch.int32),
                                                            torch.zeros(0)], 0),
     [((2, 3),), ((4,),)], dtypes=(F32,))
case("split_with_sizes", "aten.split_with_sizes.default",
     lambda x: torch.split(x, [1, 3, 0, 2], 1), [((2, 6),), ((3, 6, 2),)])
case("repeat", "aten.repeat.default", lambda x: (x.repeat(2, 3), x.repeat(2, 1, 2)),
     [((2, 3),), ((1, 4),)])
case("constant_pad_nd", "aten.constant_pad_nd.default",
     lambda x: (torch.nn.functional.pad(x, (1, 2)), torch.nn.functional.pad(x, (0, 1, -1, 2), value=3)),
     [((3, 4),), ((2, 3, 5),)])
case("reflection_pad1d", "aten.reflection_pad1d.default",
     lambda x: aten.reflection_pad1d.default(x, [2, 1]), [((2, 5),), ((1, 2, 4),)],
     dtypes=(F32, BF16, F16, I64, I32), raw=True)
case("reflection_pad2d", "aten.reflection_pad2d.default",
     lambda x: aten.reflection_pad2d.default(x, [1, 2, 2, 0]),
     [((1, 3, 4),), ((2, 2, 3, 4),)], dtypes=(F32, BF16, F16, I64, I32), raw=True)
case("reflection_pad3d", "aten.reflection_pad3d.default",
     lambda x: aten.reflection_pad3d.default(x, [1, 1, 0, 1, 1, 0]),
     [((1, 3, 3, 3),), ((1, 1, 2, 3, 4),)], dtypes=FLOATS, raw=True)
case("replication_pad2d", "aten.replication_pad2d.default",
     lambda x: aten.replication_pad2d.default(x, [1, 2, 2, 0]),
     [((1, 3, 4),), ((2, 2, 3, 4),)], dtypes=FLOATS, raw=True)
case("replication_pad3d", "aten.replication_pad3d.default",
     lambda x: aten.replication_pad3d.default(x, [1, 1, 0, 1, 2, 0]),
     [((1, 3, 3, 3),), ((1, 1, 2, 3, 4),)], dtypes=FLOATS, raw=True)
case("diagonal", "aten.diagonal.default",
     lambda x: (aten.diagonal.default(x) + 0, aten.diagonal.default(x, 1) + 0,
                aten.diagonal.default(x, -1, -1, 0) + 0), [((3, 4),), ((4, 2, 3),)],
     dtypes=(F32, BF16, F16, I64, I32))
case("as_strided", "aten.as_strided.default",
     lambda x: aten.as_strided.default(x, (2, 2), (1, 3), 1) + 0, [((3, 4),), ((12,),)],
     dtypes=(F32, BF16, F16, I64, I32))
case("flip", "aten.flip.default", lambda x: (torch.flip(x, (0,)), torch.flip(x, (-1, 1))),
     [((3, 4),), ((2, 3, 0),)])
case("slice_scatter", "aten.slice_scatter.default",
     lambda x, s: (torch.slice_scatter(x, s, 1, 1, 5, 2), torch.slice_scatter(x, s[:, :1], 1, -1)),
     [((3, 6), (3, 2)), ((2, 5), (2, 2))])
case("select_scatter", "aten.select_scatter.default",
     lambda x, s: (aten.select_scatter.default(x, s, 0, -1), aten.select_scatter.default(x, s[:1].expand(x.shape[0]), 1, 1)), [((3, 4), (4,)), ((2, 5), (5,))], raw=True)

# ---------------------------------------------------------------- matmul
MM_D = (F32, BF16, F16, I64, I32)
case("mm", "aten.mm.default", torch.mm, [((3, 4), (4, 5)), ((1, 7), (7, 2)), ((2, 0), (0, 3))],
     ("small", "small"), dtypes=MM_D)
case("bmm", "aten.bmm.default", torch.bmm, [((2, 3, 4), (2, 4, 5)), ((1, 1, 3), (1, 3, 2))],
     ("small", "small"), dtypes=MM_D)
case("addmm", "aten.addmm.default",
     lambda b, x, y: (torch.addmm(b, x, y), torch.addmm(b, x, y, beta=0.5, alpha=2)),
     [((5,), (3, 4), (4, 5)), ((3, 1), (3, 2), (2, 1))], ("small", "small", "small"),
     dtypes=FLOATS)
case("_cdist_forward", "aten._cdist_forward.default",
     lambda a, b: (torch.cdist(a, b), torch.cdist(a, b, p=1), torch.cdist(a, b, p=float("inf"))),
     [((3, 4), (5, 4)), ((2, 3, 2), (2, 4, 2))], ("any", "any"), dtypes=(F32,))
case("_pdist_forward", "aten._pdist_forward.default",
     lambda a: (torch.pdist(a), torch.pdist(a, p=1)), [((4, 3),), ((2, 5),)], dtypes=(F32,))

# ---------------------------------------------------------------- convolution
CF = (F32, BF16, F16)
CT = {"float32": (1e-4, 1e-4), "bfloat16": (2e-2, 5e-2), "float16": (1e-2, 1e-2)}
case("convolution", "aten.convolution.default",
     lambda x, w, b: (torch.nn.functional.conv2d(x, w, b),
                      torch.nn.functional.conv2d(x, w, None, stride=2, padding=1, dilation=(1, 2))),
     [((2, 3, 7, 8), (4, 3, 3, 3), (4,)), ((1, 3, 5, 5), (2, 3, 1, 2), (2,))],
     ("any", "any", "any"), dtypes=CF, tol=CT)
case("convolution groups", "aten.convolution.default",
     lambda x, w: torch.nn.functional.conv2d(x, w, groups=2, padding=(0, 1)),
     [((1, 4, 5, 5), (6, 2, 3, 3)), ((2, 4, 4, 3), (4, 2, 2, 2))], ("any", "any"), dtypes=CF, tol=CT)
case("convolution 1d/3d", "aten.convolution.default",
     lambda x, w: torch.nn.functional.conv1d(x, w, stride=2, padding=1),
     [((2, 3, 9), (4, 3, 3)), ((1, 2, 4), (2, 2, 2))], ("any", "any"), dtypes=CF, tol=CT)
case("convolution 3d", "aten.convolution.default",
     lambda x, w: torch.nn.functional.conv3d(x, w, padding=1),
     [((1, 2, 4, 4, 4), (3, 2, 3, 3, 3)), ((1, 1, 3, 2, 3), (1, 1, 1, 2, 2))], ("any", "any"),
     dtypes=CF, tol=CT)
case("conv_transpose", "aten.convolution.default",
     lambda x, w: (torch.nn.functional.conv_transpose2d(x, w, stride=2, padding=1, output_padding=1),
                   torch.nn.functional.conv_transpose2d(x, w, dilation=2)),
     [((1, 4, 5, 5), (4, 3, 3, 3)), ((2, 2, 3, 4), (2, 1, 2, 3))], ("any", "any"), dtypes=CF,
     tol=CT)
case("conv_transpose groups", "aten.convolution.default",
     lambda x, w: torch.nn.functional.conv_transpose2d(x, w, stride=(1, 2), groups=2),
     [((1, 4, 3, 3), (4, 3, 2, 2)), ((2, 2, 4, 2), (2, 2, 3, 1))], ("any", "any"), dtypes=CF,
     tol=CT)
case("convolution_backward", "aten.convolution_backward.default",
     lambda g, x, w: aten.convolution_backward.default(g, x, w, [w.shape[0]], [2, 1], [1, 0],
                                                       [1, 1], False, [0, 0], 1,
                                                       [True, True, True]),
     [((2, 4, 3, 3), (2, 3, 6, 5), (4, 3, 3, 3)), ((1, 2, 2, 4), (1, 2, 4, 4), (2, 2, 2, 1))],
     ("any", "any", "any"), dtypes=(F32,), tol=CT)
case("convolution_backward groups", "aten.convolution_backward.default",
     lambda g, x, w: aten.convolution_backward.default(g, x, w, [w.shape[0]], [1, 1], [1, 1],
                                                       [2, 1], False, [0, 0], 2,
                                                       [True, True, True]),
     [((1, 4, 3, 5), (1, 4, 5, 5), (4, 2, 3, 3)), ((2, 2, 2, 3), (2, 2, 4, 3), (2, 1, 2, 1))],
     ("any", "any", "any"), dtypes=(F32,), tol=CT)
case("col2im", "aten.col2im.default",
     lambda x: aten.col2im.default(x, [4, 5], [2, 2], [1, 1], [1, 1], [1, 2]),
     [((2, 12, 15),), ((12, 15),)], dtypes=FLOATS, raw=True)

# ---------------------------------------------------------------- pooling
PF = (F32, BF16, F16)
case("max_pool2d_with_indices", "aten.max_pool2d_with_indices.default",
     lambda x: (torch.nn.functional.max_pool2d(x, 2, return_indices=True),
                torch.nn.functional.max_pool2d(x, 3, 2, 1, ceil_mode=True, return_indices=True),
                torch.nn.functional.max_pool2d(x, 2, 1, 0, dilation=2, return_indices=True)),
     [((2, 3, 6, 7),), ((3, 5, 5),)], dtypes=(F32, BF16, F16, I64, I32))
case("max_pool3d_with_indices", "aten.max_pool3d_with_indices.default",
     lambda x: torch.nn.functional.max_pool3d(x, 2, 1, 1, return_indices=True),
     [((1, 2, 4, 4, 3),), ((2, 3, 3, 4),)], dtypes=PF)
case("max_pool2d_with_indices_backward", "aten.max_pool2d_with_indices_backward.default",
     lambda g, x: aten.max_pool2d_with_indices_backward.default(
         g, x, [2, 2], [2, 2], [0, 0], [1, 1], False,
         torch.nn.functional.max_pool2d(x, 2, return_indices=True)[1]),
     [((2, 3, 3, 2), (2, 3, 6, 5)), ((1, 2, 2), (1, 4, 4))], ("any", "any"), dtypes=(F32,))
case("avg_pool2d", "aten.avg_pool2d.default",
     lambda x: (torch.nn.functional.avg_pool2d(x, 2),
                torch.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True),
                torch.nn.functional.avg_pool2d(x, 3, 2, 1, count_include_pad=False),
                torch.nn.functional.avg_pool2d(x, 2, 1, 1, divisor_override=3)),
     [((2, 3, 6, 7),), ((3, 5, 5),)], dtypes=PF)
case("avg_pool3d", "aten.avg_pool3d.default",
     lambda x: (torch.nn.functional.avg_pool3d(x, 2, 1, 1),
                torch.nn.functional.avg_pool3d(x, 2, 2, 1, count_include_pad=False)),
     [((1, 2, 4, 4, 3),), ((2, 3, 3, 4),)], dtypes=PF)
case("avg_pool2d_backward", "aten.avg_pool2d_backward.default",
     lambda g, x: aten.avg_pool2d_backward.default(g, x, [3, 3], [2, 2], [1, 1], False, False,
                                                   None),
     [((2, 3, 3, 4), (2, 3, 6, 7)), ((1, 2, 2), (1, 4, 3))], ("any", "any"), dtypes=(F32,))
case("_adaptive_avg_pool2d", "aten._adaptive_avg_pool2d.default",
     lambda x: (torch.nn.functional.adaptive_avg_pool2d(x, (3, 2)),
                torch.nn.functional.adaptive_avg_pool2d(x, 1)),
     [((2, 3, 7, 5),), ((3, 4, 4),)], dtypes=PF)
case("_adaptive_avg_pool3d", "aten._adaptive_avg_pool3d.default",
     lambda x: torch.nn.functional.adaptive_avg_pool3d(x, (2, 3, 1)),
     [((1, 2, 4, 5, 3),), ((2, 3, 3, 4),)], dtypes=PF)
case("_adaptive_avg_pool2d_backward", "aten._adaptive_avg_pool2d_backward.default",
     lambda g, x: aten._adaptive_avg_pool2d_backward.default(g, x),
     [((2, 3, 3, 2), (2, 3, 7, 5)), ((1, 2, 2), (1, 5, 3))], ("any", "any"), dtypes=(F32,))
case("upsample_nearest2d", "aten.upsample_nearest2d.vec",
     lambda x: (torch.nn.functional.interpolate(x, size=(5, 7), mode="nearest"),
                torch.nn.functional.interpolate(x, scale_factor=2, mode="nearest")),
     [((1, 2, 3, 4),), ((2, 1, 4, 4),)], dtypes=PF)
case("upsample_bilinear2d", "aten.upsample_bilinear2d.vec",
     lambda x: (torch.nn.functional.interpolate(x, size=(5, 7), mode="bilinear"),
                torch.nn.functional.interpolate(x, size=(2, 3), mode="bilinear",
                                                align_corners=True),
                torch.nn.functional.interpolate(x, scale_factor=1.5, mode="bilinear")),
     [((1, 2, 3, 4),), ((2, 1, 4, 4),)], dtypes=PF)
case("grid_sampler_2d", "aten.grid_sampler_2d.default",
     lambda x, g: (torch.nn.functional.grid_sample(x, g, align_corners=False),
                   torch.nn.functional.grid_sample(x, g, mode="nearest", padding_mode="border",
                                                   align_corners=True)),
     [((1, 2, 4, 5), (1, 3, 2, 2)), ((2, 1, 3, 3), (2, 2, 4, 2))], ("any", "small"),
     dtypes=(F32,))

# ---------------------------------------------------------------- normalization
case("_softmax", "aten._softmax.default",
     lambda x: (torch.softmax(x, -1), torch.softmax(x, 0)), [((3, 4),), ((2, 3, 5),)],
     dtypes=FLOATS)
case("_log_softmax", "aten._log_softmax.default",
     lambda x: (torch.log_softmax(x, 1), torch.log_softmax(x, -1)), [((3, 4),), ((2, 3, 5),)],
     dtypes=FLOATS)
case("native_layer_norm", "aten.native_layer_norm.default",
     lambda x, w, b: aten.native_layer_norm.default(x, [x.shape[-1]], w, b, 1e-5),
     [((3, 8), (8,), (8,)), ((2, 3, 5), (5,), (5,))], dtypes=FLOATS)
case("native_layer_norm 2d", "aten.native_layer_norm.default",
     lambda x: aten.native_layer_norm.default(x, list(x.shape[-2:]), None, None, 1e-5),
     [((3, 4, 5),), ((2, 3, 2),)], dtypes=FLOATS)
case("native_layer_norm_backward", "aten.native_layer_norm_backward.default",
     lambda g, x, w, b: aten.native_layer_norm_backward.default(
         g, x, [x.shape[-1]], *aten.native_layer_norm.default(x, [x.shape[-1]], w, b, 1e-5)[1:],
         w, b, [True, True, True]),
     [((3, 8), (3, 8), (8,), (8,)), ((2, 3, 5), (2, 3, 5), (5,), (5,))], dtypes=(F32,), raw=True)
case("batch_norm no_training", "aten._native_batch_norm_legit_no_training.default",
     lambda x, w, b, m, v: aten._native_batch_norm_legit_no_training.default(x, w, b, m, v, 0.1,
                                                                            1e-5)[0],
     [((2, 3, 4, 4), (3,), (3,), (3,), (3,)), ((4, 2), (2,), (2,), (2,), (2,))],
     ("any", "any", "any", "any", "pos"), dtypes=FLOATS)
case("batch_norm no_stats", "aten._native_batch_norm_legit.no_stats",
     lambda x, w, b: aten._native_batch_norm_legit.no_stats(x, w, b, True, 0.1, 1e-5),
     [((2, 3, 4, 4), (3,), (3,)), ((4, 2, 3), (2,), (2,))], dtypes=(F32,))
case("native_group_norm", "aten.native_group_norm.default",
     lambda x, w, b: aten.native_group_norm.default(x, w, b, x.shape[0], x.shape[1],
                                                    int(np.prod(x.shape[2:])), 2, 1e-5),
     [((2, 4, 3, 3), (4,), (4,)), ((1, 6, 5), (6,), (6,))], dtypes=FLOATS)
case("native_group_norm_backward", "aten.native_group_norm_backward.default",
     lambda g, x, w: aten.native_group_norm_backward.default(
         g, x, *aten.native_group_norm.default(x, w, None, x.shape[0], x.shape[1],
                                               int(np.prod(x.shape[2:])), 2, 1e-5)[1:],
         w, x.shape[0], x.shape[1], int(np.prod(x.shape[2:])), 2, [True, True, True]),
     [((2, 4, 3, 3), (2, 4, 3, 3), (4,)), ((1, 6, 5), (1, 6, 5), (6,))], dtypes=(F32,), raw=True)

# ---------------------------------------------------------------- indexing
case("embedding", "aten.embedding.default", lambda w, i: torch.nn.functional.embedding(i, w),
     [((10, 4), (2, 3)), ((5, 3), (7,))], ("any", "idx:5"))
case("embedding_dense_backward", "aten.embedding_dense_backward.default",
     lambda g, i: (aten.embedding_dense_backward.default(g, i, 6, -1, False),
                   aten.embedding_dense_backward.default(g, i, 6, 2, True)),
     [((2, 3, 4), (2, 3)), ((5, 2), (5,))], ("any", "idx:6"), dtypes=(F32,), raw=True)
case("gather", "aten.gather.default",
     lambda x, i: (torch.gather(x, 1, i), torch.gather(x, -1, i)),
     [((3, 5), (3, 4)), ((2, 6, 3), (2, 2, 2))], ("any", "idx:3"))
case("index_select", "aten.index_select.default",
     lambda x, i: (torch.index_select(x, 0, i), torch.index_select(x, -1, i)),
     [((4, 5), (3,)), ((4, 2, 4), (0,))], ("any", "idx:4"))
case("index.Tensor", "aten.index.Tensor",
     lambda x, i, j: (x[i], x[i, j], x[:, i], x[i, :, j]),
     [((4, 5, 6), (3,), (3,)), ((4, 4, 4), (2, 2), (1, 2))], ("any", "nidx:4", "nidx:4"))
case("index_put", "aten.index_put.default",
     lambda x, i, v: (torch.index_put(x, (i,), v), torch.index_put(x, (i,), v, accumulate=True),
                      torch.index_put(x, (i, i), torch.tensor(7).to(x.dtype))),
     [((5, 3), (2,), (2, 3)), ((4, 4, 2), (3,), (3, 4, 2))], ("any", "perm:3", "any"))
case("scatter.src", "aten.scatter.src", lambda x, i, s: torch.scatter(x, 1, i, s),
     [((3, 5), (3, 2), (3, 4)), ((2, 4, 3), (1, 3, 3), (2, 4, 3))], ("any", "perm:3", "any"))
case("scatter.value", "aten.scatter.value", lambda x, i: torch.scatter(x, 0, i, 2),
     [((3, 5), (2, 5)), ((4, 2), (1, 2))], ("any", "idx:2"))
case("scatter_add", "aten.scatter_add.default",
     lambda x, i, s: torch.scatter_add(x, -1, i, s),
     [((3, 5), (3, 6), (3, 6)), ((2, 4), (1, 3), (2, 4))], ("small", "idx:4", "small"),
     dtypes=(F32, BF16, F16, I64, I32))
case("scatter_reduce", "aten.scatter_reduce.two",
     lambda x, i, s: tuple(torch.scatter_reduce(x, 1, i, s, r, include_self=inc)
                           for r in ("sum", "prod", "amax", "amin", "mean")
                           for inc in (True, False)),
     [((3, 5), (3, 6), (3, 6)), ((2, 4), (1, 3), (2, 4))], ("small", "idx:4", "small"),
     dtypes=(F32, BF16, F16, I64, I32))
case("masked_scatter", "aten.masked_scatter.default",
     lambda x, m, s: torch.masked_scatter(x, m, s),
     [((3, 4), (3, 4), (12,)), ((2, 3), (3,), (3, 3))], ("any", "mask", "any"))
case("sort", "aten.sort.default",
     lambda x: (torch.sort(x, -1), torch.sort(x, 0, descending=True)),
     [((3, 6),), ((4, 2, 3),)], check="sort", dtypes=(F32, BF16, F16, I64, I32))
case("topk", "aten.topk.default",
     lambda x: (torch.topk(x, 2), torch.topk(x, 3, 0, largest=False)),
     [((4, 6),), ((3, 2, 5),)], check="sort", dtypes=(F32, BF16, F16, I64, I32))


# ---------------------------------------------------------------- ops for OpInfo and real exports
case("cumprod", "aten.cumprod.default", lambda x: (torch.cumprod(x, 1), torch.cumprod(x, -1)),
     [((3, 4),), ((2, 5, 0),)], ("small",), tol={"bfloat16": (4e-2, 2e-2)})
case("cumprod dtype", "aten.cumprod.default", lambda x: torch.cumprod(x, 0, dtype=torch.float32),
     [((6,),), ((3, 2),)], ("small",))
case("histc", "aten.histc.default",
     lambda x: (torch.histc(x, 5, -1, 1), torch.histc(x, 4), torch.histc(x * 0 + 2, 3)),
     [((20,),), ((3, 7),)], dtypes=(F32,))
case("round.decimals", "aten.round.decimals",
     lambda x: (torch.round(x, decimals=2), torch.round(x * 100, decimals=-1),
                torch.round(x, decimals=0)), S2, dtypes=FLOATS)
case("unfold", "aten.unfold.default", lambda x: (x.unfold(1, 3, 2), x.unfold(0, 2, 1) + 0),
     [((4, 7),), ((3, 5, 2),)])
case("sort.stable", "aten.sort.stable",
     lambda x: (torch.sort(x, dim=-1, stable=True),
                torch.sort(x, dim=0, descending=True, stable=True)),
     [((3, 6),), ((4, 2, 3),)], ("small",), check="sort", dtypes=(F32, BF16, F16, I64, I32))
case("tril_indices/triu_indices", ["aten.tril_indices.default", "aten.triu_indices.default"],
     lambda x: (torch.triu_indices(3, 5, 1), torch.tril_indices(4, 3, -1),
                torch.triu_indices(4, 4, dtype=torch.int32), x + 0), [((1,),), ((2,),)],
     dtypes=(F32,))
case("empty_permuted", "aten.empty_permuted.default",
     lambda x: torch.empty_permuted((2, 3, 4), (0, 2, 1), dtype=x.dtype), [((1,),), ((3,),)],
     check="shape")
case("lift_fresh_copy", "aten.lift_fresh_copy.default",
     lambda x: aten.lift_fresh_copy.default(x) + 1, [((2, 3),), ((3,),)], dtypes=(F32, I64),
     raw=True)
case("searchsorted", "aten.searchsorted.Tensor",
     lambda s, x: (torch.searchsorted(torch.sort(s)[0], x), torch.searchsorted(
         torch.sort(s)[0], x, right=True, out_int32=True)),
     [((7,), (3, 4)), ((2, 5), (2, 3))], ("small", "small"), dtypes=(F32, I64, I32))
case("searchsorted sorter", "aten.searchsorted.Tensor",
     lambda s, x: torch.searchsorted(s, x, side="right", sorter=torch.argsort(s)),
     [((6,), (5,)), ((3, 4), (3, 2))], ("small", "small"), dtypes=(F32, I64))
case("copysign.Tensor", "aten.copysign.Tensor", torch.copysign, B2, ("special", "special"),
     dtypes=(F32, BF16, F16, I64))
case("signbit", "aten.signbit.default", lambda x: (torch.signbit(x), torch.signbit(-x)), S2,
     ("special",))
case("nextafter", "aten.nextafter.default", lambda a, b: torch.nextafter(a, b),
     [((3, 4), (3, 4)), ((2, 1, 4), (3, 1))], ("any", "any"), dtypes=(F32,), tol={"float32": (0, 0)})
case("cummax/cummin", ["aten.cummax.default", "aten.cummin.default"],
     lambda x: (torch.cummax(x, 1), torch.cummin(x, -1), torch.cummax(x, 0)),
     [((3, 7),), ((2, 5, 0),)], ("small",), dtypes=(F32, BF16, F16, I64, I32))
case("cummax nan", ["aten.cummax.default", "aten.cummin.default"],
     lambda x: (torch.cummax(x, -1), torch.cummin(x, 0)), [((4, 9),), ((12,),)], ("special",),
     dtypes=(F32,))

# ---------------------------------------------------------------- special functions
# (XLA's own expansions: chlo.lgamma/digamma/polygamma/zeta/erf_inv/erfc/bessel_i1e; i0e as
# Cephes' Chebyshev series.) Half types compute in f32 and round once.
SPECIAL_T = {"float32": (2e-4, 1e-5)}
SW = [((4, 5),), ((2, 0),), ((),)]
for op, f, kind in [
    ("lgamma", torch.lgamma, "any"), ("digamma", torch.digamma, "nz"),
    ("erfinv", torch.erfinv, "unit"), ("erfc", torch.erfc, "any"), ("exp2", torch.exp2, "any"),
    ("i0", torch.i0, "any"), ("special_i0e", torch.special.i0e, "any"),
    ("special_i1", torch.special.i1, "any"), ("special_i1e", torch.special.i1e, "any"),
    ("special_modified_bessel_i0", torch.special.modified_bessel_i0, "any"),
    ("special_modified_bessel_i1", torch.special.modified_bessel_i1, "any"),
    ("special_spherical_bessel_j0", torch.special.spherical_bessel_j0, "any"),
]:
    case(op, f"aten.{op}.default", f, SW, (kind,), dtypes=(F32, BF16, F16, I64), tol=SPECIAL_T)
case("i0 wide", ["aten.i0.default", "aten.special_i0e.default", "aten.special_i1e.default"],
     lambda x: (torch.i0(x * 12), torch.special.i0e(x * 40), torch.special.i1e(x * 40)),
     [((6, 7),), ((3,),)], dtypes=(F32,), tol=SPECIAL_T)
case("polygamma", "aten.polygamma.default",
     lambda x: tuple(torch.polygamma(n, x) for n in range(4)), [((3, 4),), ((5,),)], ("pos",),
     dtypes=(F32, BF16, F16), tol={"float32": (1e-3, 1e-4)})
case("special_zeta", "aten.special_zeta.default", torch.special.zeta,
     [((3, 4), (3, 4)), ((2, 1, 3), (3,))], ("ge1", "pos"), dtypes=(F32,), tol=SPECIAL_T)

# ------------------------------------------------------------------------------- running

class Group(torch.nn.Module):
    """Applies ``fn`` to consecutive groups of inputs; returns all results flat."""

    def __init__(self, fn, counts):
        super().__init__()
        self.fn = fn
        self.counts = counts

    def forward(self, *xs):
        outs, k = [], 0
        for n in self.counts:
            r = self.fn(*xs[k:k + n])
            k += n
            outs.extend(_flat(r))
        return tuple(outs)


def _flat(r):
    from torch.utils import _pytree
    return _pytree.tree_flatten(r)[0]


def write_graph(model, inputs, folder, exact: bool, raw: bool = False):
    """Dumps ``model`` with ``fxhlo.dump.dump``; nondeterministic graphs (random ops, empty)
    are written with the same exporter but without dump's eager re-check."""
    if exact and not raw:
        fxdump.dump(model, inputs, folder, name="sweep", tolerance={"rtol": 1e-3, "atol": 1e-3})
        return json.loads((Path(folder) / "graph.json").read_text())
    ep = torch.export.export(model.eval(), inputs) if raw else fxdump.export_program(model, inputs)
    g = fxdump.graph_to_fxjson(ep)
    os.makedirs(folder, exist_ok=True)
    (Path(folder) / "graph.json").write_text(fxdump.to_json_text(g))
    from safetensors.torch import save_file
    w = fxdump.collect_weights(ep)
    if w:
        save_file(w, str(Path(folder) / "weights.safetensors"))
    return g


def check_outputs(c: Case, got, want, ins, what):
    if c.check == "shape":
        for a, b in zip(got, want):
            if a.shape != tuple(b.shape) or str(a.dtype) != str(xla.to_numpy(b).dtype):
                raise AssertionError(f"{what}: {a.dtype}{a.shape} vs {b.dtype}{tuple(b.shape)}")
        return
    if c.check in ("uniform", "normal"):
        a = got[0].astype(np.float64)
        if a.shape != tuple(want[0].shape):
            raise AssertionError(f"{what}: shape {a.shape}")
        if c.check == "uniform":
            ok = a.min() >= 0 and a.max() <= 1 and abs(a.mean() - 0.5) < 0.05
        else:
            ok = abs(a.mean()) < 0.1 and abs(a.std() - 1) < 0.1
        if not ok:
            raise AssertionError(f"{what}: bad {c.check} sample mean {a.mean()} std {a.std()}")
        return
    if c.check == "perm":
        if sorted(got[0].tolist()) != list(range(len(got[0]))):
            raise AssertionError(f"{what}: not a permutation: {got[0]}")
        return
    if c.check == "dropout":
        out, mask = got
        x = xla.to_numpy(ins[0]).astype(np.float64)
        o = out.astype(np.float64)
        keep = mask.astype(bool)
        tol = 2e-2 if out.dtype != np.float32 else 1e-5
        if not (np.allclose(o[keep], x[keep] / 0.75, rtol=tol, atol=tol) and
                np.all(o[~keep] == 0) and abs(keep.mean() - 0.75) < 0.05):
            raise AssertionError(f"{what}: dropout output inconsistent (keep {keep.mean()})")
        return
    if c.check == "sort":
        # values must match; indices must point at those values
        for k in range(0, len(got), 2):
            xla.assert_close(got[k], xla.to_numpy(want[k]), f"{what} values", c.tol)
        return
    for k, (a, b) in enumerate(zip(got, want)):
        xla.assert_close(a, xla.to_numpy(b), f"{what} output {k}", c.tol and {**xla.TOLERANCE, **c.tol})


@dataclass
class Result:
    passed: Counter = field(default_factory=Counter)
    failed: list = field(default_factory=list)
    skipped_dtypes: Counter = field(default_factory=Counter)
    ops_seen: set = field(default_factory=set)
    ops_passed: set = field(default_factory=set)


def variants(c: Case, seed=0):
    """(label, dtype, inputs, eager outputs) for every shape x dtype that eager accepts."""
    out = []
    for si, shapes in enumerate(c.shapes):
        for d in c.dtypes:
            gen = torch.Generator().manual_seed(seed + 17 * si)
            kinds = list(c.kinds) + [c.kinds[-1]] * (len(shapes) - len(c.kinds))
            ins = tuple(make(s, d, k, gen) for s, k in zip(shapes, kinds))
            try:
                with torch.no_grad():
                    want = _flat(c.fn(*ins))
            except Exception:
                continue  # eager does not take this dtype
            out.append((f"{c.name} {NAMES[d]} {[tuple(s) for s in shapes]}", d, ins, want))
    return out


def run_group(c: Case, vs, runner, tmp, res: Result, split_on_fail=True):
    exact = c.check not in ("uniform", "normal", "perm", "dropout", "shape")
    counts = [len(v[2]) for v in vs]
    model = Group(c.fn, counts)
    ins = tuple(x for v in vs for x in v[2])
    folder = Path(tmp) / f"g{abs(hash((c.name, len(vs), vs[0][0]))) % 10**8}"
    try:
        g = write_graph(model, ins, folder, exact, c.raw)
        ops = {n["op"] for n in g["nodes"]}
        res.ops_seen |= ops
        missing = [o for o in c.ops if o not in ops]
        if missing:
            raise AssertionError(f"exported graph lacks {missing} (has {sorted(ops)})")
        text = xla.lower(folder, inline_constants=True)
        exe = runner.compile(text)
        # user inputs in graph order are our inputs in order
        outs = runner.execute(exe, [xla.to_numpy(x) for x in ins])
    except Exception as e:
        if split_on_fail and len(vs) > 1:
            for v in vs:
                run_group(c, [v], runner, tmp, res, split_on_fail=False)
            return
        for v in vs:
            res.failed.append((v[0], f"{type(e).__name__}: {str(e)[:800]}"))
        return
    k = 0
    for label, d, vins, want in vs:
        got = outs[k:k + len(want)]
        k += len(want)
        try:
            check_outputs(c, got, want, vins, label)
            if c.check == "sort":
                _check_sort(got, vins, c, label)
            res.passed[NAMES[d]] += 1
            res.ops_passed |= set(c.ops)
        except AssertionError as e:
            res.failed.append((label, str(e)[:800]))


def _check_sort(got, ins, c, label):
    x = ins[0]
    # the sort/topk outputs come in (values, indices) pairs along known dims
    dims = [(-1,), (0,)] if c.name == "sort" else [(-1,), (0,)]
    for p, (dim,) in enumerate(dims):
        v, i = got[2 * p], got[2 * p + 1]
        t = torch.take_along_dim(x, torch.from_numpy(i.astype(np.int64)), dim)
        xla.assert_close(xla.to_numpy(t), v, f"{label} indices {p}")


def _ty(t):
    return {"dtype": fxdump.dtype_name(t.dtype), "shape": list(t.shape)}


def handmade_cases(runner, tmp, res: Result, filters=()):
    """Overloads that ``torch.export`` can never produce (it functionalizes the in-place
    running-stat update of training batch norm into another op): a one-node fxjson written
    here, from the op's schema argument names, and compared with eager the same way."""
    name = "batch_norm training"
    if filters and not any(f in name for f in filters):
        return
    op = "aten._native_batch_norm_legit.default"
    for si, shape in enumerate([(2, 3, 4, 4), (4, 2)]):
        for d in FLOATS:
            label = f"{name} {NAMES[d]} {shape}"
            gen = torch.Generator().manual_seed(si)
            c = shape[1]
            x, w, b, m = (make(s, d, "any", gen) for s in (shape, (c,), (c,), (c,)))
            v = make((c,), d, "pos", gen)
            want = list(aten._native_batch_norm_legit.default(x, w, b, m.clone(), v.clone(),
                                                              True, 0.1, 1e-5))
            names = ["x", "w", "b", "m", "v"]
            ins = [x, w, b, m, v]
            g = {"format": "fxhlo-graph", "version": 1, "producer": {"test": "handmade"},
                 "inputs": [{"name": n, "kind": "user_input", "type": _ty(t)}
                            for n, t in zip(names, ins)],
                 "nodes": [{"name": "bn", "op": op,
                            "args": {"input": {"tensor": "x"}, "weight": {"tensor": "w"},
                                     "bias": {"tensor": "b"}, "running_mean": {"tensor": "m"},
                                     "running_var": {"tensor": "v"}, "training": {"bool": True},
                                     "momentum": {"float": 0.1}, "eps": {"float": 1e-5}},
                            "results": [{"name": r, "type": _ty(t)}
                                        for r, t in zip(["out", "mean", "rstd"], want)]}],
                 "outputs": ["out", "mean", "rstd"]}
            folder = Path(tmp) / f"bn{si}{NAMES[d]}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "graph.json").write_text(json.dumps(g))
            try:
                text = xla.lower(folder / "graph.json", inline_constants=True)
                got = runner.run(text, [xla.to_numpy(t) for t in ins])
                for k, (a, bb) in enumerate(zip(got, want)):
                    xla.assert_close(a, xla.to_numpy(bb), f"{label} output {k}")
                res.passed[NAMES[d]] += 1
                res.ops_passed.add(op)
            except Exception as e:
                res.failed.append((label, f"{type(e).__name__}: {str(e)[:800]}"))


def run_sweep(filters=()) -> Result:
    res = Result()
    runner = xla.Runner()
    with tempfile.TemporaryDirectory() as tmp:
        for c in CASES:
            if filters and not any(f in c.name for f in filters):
                continue
            vs = variants(c)
            if not vs:
                res.failed.append((c.name, "eager accepts none of the dtypes"))
                continue
            run_group(c, vs, runner, tmp, res)
        handmade_cases(runner, tmp, res, filters)
    return res


def summary(res: Result) -> str:
    total = sum(res.passed.values())
    per = ", ".join(f"{d} {res.passed[d]}" for d in NAMES.values())
    return (f"op sweep: {total} variants passed ({per}), {len(res.failed)} failed; "
            f"{len(res.ops_passed)} ops covered")


def test_op_sweep():
    res = run_sweep()
    print(summary(res))
    for label, msg in res.failed:
        print(f"FAIL {label}: {msg}")
    assert not res.failed, f"{len(res.failed)} op variants failed"


if __name__ == "__main__":
    r = run_sweep(sys.argv[1:])
    for label, msg in r.failed:
        print(f"FAIL {label}: {msg}")
    print("ops covered:", " ".join(sorted(r.ops_passed)))
    print(summary(r))
    sys.exit(1 if r.failed else 0)
