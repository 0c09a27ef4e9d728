"""Decompositions of ATen ops outside fxhlo's op table into ops inside it, for the
``torch.compile`` path (:func:`fxhlo.backend.decompositions` adds them; the ``.pt2``/CLI path
reads ops as exported and does not use them).

Each one computes exactly what the op computes (the same elementwise arithmetic in the same
dtype, or a copy of a view), as torch's own decompositions or references do, so numerics are
unchanged: the ``*_copy`` views, ``max``/``min`` of a whole tensor, ``fmax``/``fmin``,
``hypot`` (torch's reference ``sqrt(a * a + b * b)``), ``addbmm``, ``index_reduce`` and
``scatter.reduce`` (as ``scatter_reduce``), ``put`` (as ``index_put`` on the flattened
tensor), ``bucketize`` (as ``searchsorted``), ``new_empty_strided``, and the random
``rand_like``, ``randn_like``, ``bernoulli.p``, ``uniform``, ``normal`` (four overloads and
``normal_functional``), ``exponential``, ``cauchy``, ``log_normal``, ``geometric`` and
``randint``/``randint_like`` by inverse transform of ``rand``/``randn`` (the values are the
backend's random numbers, as for ``rand``; only the distribution is torch's).  Also
``_trilinear`` (``nn.functional.bilinear``: the product of the unsqueezed inputs summed, the
sums in another order than ATen's bmm), ``angle`` of real tensors, ``kthvalue``,
``median``/``nanmedian`` (whole and along a dimension: a sort and the element of the rank,
NaN ranked last as ATen ranks it; with ties the index may be another of the equal values) and
``diagonal_scatter`` (``index_put`` on the diagonal), ``adaptive_max_pool2d`` where torch's
own decomposition gives up (windows of uneven sizes: each window's maximum and first argmax)
and its backward (a ``scatter_add`` at the indices), ``as_strided_scatter`` of a contiguous
tensor (``index_put`` at the strided positions), ``frexp`` (exact: ``log2`` corrected by one
step), ``masked_scatter_backward`` (the gradient at the mask's positions by a cumulative
count) and ``logcumsumexp`` (in float64 with the slice's maximum taken out: more accurate
than ATen's, within float32's tolerance of it), ``nonzero_static`` (each nonzero's row by a
cumulative count), and the triangular solves ``linalg_solve_triangular``,
``triangular_solve``, ``cholesky_solve`` and ``cholesky_inverse`` by substitution row by row
(the sums of a triangular solve in another order), and ``segment_reduce`` by 1-D lengths or
offsets (each element's segment by ``searchsorted``, then ``scatter_reduce``; forward only),
and ``prims.convert_element_type`` (from torch's references) as ``_to_copy``.  The
linear algebra composites ``linalg_pinv`` (ATen's own, op for op, on ``_linalg_svd`` or
``_linalg_eigh``), ``linalg_matrix_sqrth`` (``V diag(sqrt(max(w, 0))) V^T`` from
``_linalg_eigh``) and ``linalg_polar`` (from ``_linalg_svd``, as the CPU computes it) sit on
the factorizations of the op table (whose kernels compute in float64).  The backward of
``max_pool3d_with_indices`` and of ``replication_pad1d``/``2d`` scatter-add each gradient at its
source (the argmax, or the clamped index; duplicates are summed in another order).
"""

from __future__ import annotations

import math
from typing import Callable, Dict

import torch

aten = torch.ops.aten


def _view_copy(x, size):
    return aten.clone.default(aten.view.default(x, size))


def _permute_copy(x, dims):
    return aten.clone.default(aten.permute.default(x, dims))


def _narrow_copy(x, dim, start, length):
    return aten.clone.default(aten.slice.Tensor(x, dim, start, start + length))


def _as_strided_copy(x, size, stride, storage_offset=None):
    return aten.clone.default(aten.as_strided.default(x, size, stride, storage_offset))


def _unbind_copy(x, dim=0):
    return [aten.clone.default(aten.select.int(x, dim, i)) for i in range(x.shape[dim])]


def _max_all(x):
    return aten.amax.default(x, list(range(x.dim())))


def _min_all(x):
    return aten.amin.default(x, list(range(x.dim())))


def _fmax(a, b):
    # the larger of the two, the other one where one is NaN
    m = aten.maximum.default(a, b)
    m = aten.where.self(aten.isnan.default(a), b, m)
    return aten.where.self(aten.isnan.default(b), a, m)


def _fmin(a, b):
    m = aten.minimum.default(a, b)
    m = aten.where.self(aten.isnan.default(a), b, m)
    return aten.where.self(aten.isnan.default(b), a, m)


def _hypot(a, b):
    return aten.sqrt.default(aten.add.Tensor(aten.mul.Tensor(a, a), aten.mul.Tensor(b, b)))


def _addbmm(self, batch1, batch2, *, beta=1, alpha=1):
    s = aten.sum.dim_IntList(aten.bmm.default(batch1, batch2), [0])
    if alpha != 1:
        s = aten.mul.Scalar(s, alpha)
    if beta == 0:  # self is ignored (its NaNs too)
        return s
    if beta != 1:
        self = aten.mul.Scalar(self, beta)
    return aten.add.Tensor(self, s)


def _expanded_index(index, dim, like):
    """``index`` (1-D, along ``dim``) broadcast to the shape of ``like``."""
    shape = [1] * like.dim()
    if like.dim():
        shape[dim] = index.shape[0]
    return aten.expand.default(aten.view.default(index, shape), list(like.shape))


def _index_reduce(self, dim, index, source, reduce, *, include_self=True):
    dim = dim % max(self.dim(), 1)
    red = {"prod": "prod", "mean": "mean", "amax": "amax", "amin": "amin"}[reduce]
    return aten.scatter_reduce.two(self, dim, _expanded_index(index, dim, source), source, red,
                                   include_self=include_self)


def _scatter_reduce_src(self, dim, index, src, *, reduce):
    red = {"add": "sum", "multiply": "prod"}[reduce]
    return aten.scatter_reduce.two(self, dim, index, src, red, include_self=True)


def _scatter_reduce_value(self, dim, index, value, *, reduce):
    src = aten.full.default(list(index.shape), value, dtype=self.dtype)
    return _scatter_reduce_src(self, dim, index, src, reduce=reduce)


def _put(self, index, source, accumulate=False):
    flat = aten.view.default(self, [-1])
    n = flat.shape[0]
    idx = aten.view.default(index, [-1])
    idx = aten.where.self(aten.lt.Scalar(idx, 0), aten.add.Scalar(idx, n), idx)
    out = aten.index_put.default(flat, [idx], aten.view.default(source, [-1]), accumulate)
    return aten.view.default(out, list(self.shape))


def _bucketize(self, boundaries, *, out_int32=False, right=False):
    return aten.searchsorted.Tensor(boundaries, self, out_int32=out_int32, right=right)


def _new_empty_strided(self, size, stride, *, dtype=None, layout=None, device=None,
                       pin_memory=None):
    return aten.empty_strided.default(size, stride, dtype=dtype or self.dtype, device=self.device)


def _rand_like(self, *, dtype=None, layout=None, device=None, pin_memory=None,
               memory_format=None):
    return aten.rand.default(list(self.shape), dtype=dtype or self.dtype, device=self.device)


def _randn_like(self, *, dtype=None, layout=None, device=None, pin_memory=None,
                memory_format=None):
    return aten.randn.default(list(self.shape), dtype=dtype or self.dtype, device=self.device)


def _bernoulli_p(self, p=0.5, *, generator=None):
    r = aten.rand.default(list(self.shape), dtype=self.dtype, device=self.device)
    return aten._to_copy.default(aten.lt.Scalar(r, p), dtype=self.dtype)


def _uniform_like(self, dtype=None):
    """``rand`` of ``self``'s shape (f32 numbers for half types, then rounded)."""
    d = dtype or self.dtype
    cd = torch.float32 if d in (torch.float16, torch.bfloat16) else d
    return aten.rand.default(list(self.shape), dtype=cd, device=self.device)


def _exponential(self, lambd=1.0, *, generator=None):
    u = _uniform_like(self)
    return aten._to_copy.default(aten.div.Scalar(aten.neg.default(aten.log1p.default(
        aten.neg.default(u))), lambd), dtype=self.dtype)


def _cauchy(self, median=0.0, sigma=1.0, *, generator=None):
    u = _uniform_like(self)
    t = aten.tan.default(aten.mul.Scalar(aten.sub.Scalar(u, 0.5), math.pi))
    return aten._to_copy.default(aten.add.Scalar(aten.mul.Scalar(t, sigma), median),
                                 dtype=self.dtype)


def _log_normal(self, mean=1.0, std=2.0, *, generator=None):
    z = aten.randn.default(list(self.shape), dtype=self.dtype, device=self.device)
    return aten.exp.default(aten.add.Scalar(aten.mul.Scalar(z, std), mean))


def _geometric(self, p, *, generator=None):
    u = _uniform_like(self)
    k = aten.ceil.default(aten.div.Scalar(aten.log1p.default(aten.neg.default(u)),
                                          math.log1p(-p)))
    k = aten.clamp.default(k, 1)  # u == 0 gives 0 trials; a geometric number is at least 1
    return aten._to_copy.default(k, dtype=self.dtype)


def _uniform(self, from_=0.0, to=1.0, *, generator=None):
    u = _uniform_like(self)
    return aten._to_copy.default(aten.add.Scalar(aten.mul.Scalar(u, to - from_), from_),
                                 dtype=self.dtype)


def _normal_tt(mean, std, *, generator=None):
    shape = torch.broadcast_shapes(mean.shape, std.shape)
    dt = torch.promote_types(mean.dtype, std.dtype)
    z = aten.randn.default(list(shape), dtype=dt, device=mean.device)
    return aten.add.Tensor(aten.mul.Tensor(z, std), mean)


def _normal_tf(mean, std=1.0, *, generator=None):
    z = aten.randn.default(list(mean.shape), dtype=mean.dtype, device=mean.device)
    return aten.add.Tensor(aten.mul.Scalar(z, std), mean)


def _normal_ft(mean, std, *, generator=None):
    z = aten.randn.default(list(std.shape), dtype=std.dtype, device=std.device)
    return aten.add.Scalar(aten.mul.Tensor(z, std), mean)


def _normal_ff(mean, std, size, *, generator=None, dtype=None, layout=None, device=None,
               pin_memory=None):
    z = aten.randn.default(list(size), dtype=dtype or torch.get_default_dtype(), device=device)
    return aten.add.Scalar(aten.mul.Scalar(z, std), mean)


def _normal_functional(self, mean=0.0, std=1.0, *, generator=None):
    z = aten.randn.default(list(self.shape), dtype=self.dtype, device=self.device)
    return aten.add.Scalar(aten.mul.Scalar(z, std), mean)


def _randint_range(low, high, size, dtype, device):
    """``low + floor(u * (high - low))`` from f64 uniforms, at most ``high - 1``."""
    u = aten.rand.default(list(size), dtype=torch.float64, device=device)
    k = aten.floor.default(aten.mul.Scalar(u, high - low))
    k = aten.clamp.default(k, None, high - low - 1)
    return aten._to_copy.default(aten.add.Scalar(k, low), dtype=dtype)


def _randint(high, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _randint_range(0, high, size, dtype or torch.int64, device)


def _randint_low(low, high, size, *, dtype=None, layout=None, device=None, pin_memory=None):
    return _randint_range(low, high, size, dtype or torch.int64, device)


def _randint_like(self, high, *, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
    return _randint_range(0, high, self.shape, dtype or self.dtype, self.device)


def _randint_like_low(self, low, high, *, dtype=None, layout=None, device=None,
                      pin_memory=None, memory_format=None):
    return _randint_range(low, high, self.shape, dtype or self.dtype, self.device)


def _trilinear(i1, i2, i3, expand1, expand2, expand3, sumdim, unroll_dim=1):
    # ATen's definition: each input unsqueezed at its expand dims (in increasing order), the
    # product summed over sumdim (ATen sums pairwise products by bmm: the same sums, in
    # another order)
    def grow(x, dims):
        for d in sorted(dims):
            x = aten.unsqueeze.default(x, d)
        return x
    p = aten.mul.Tensor(aten.mul.Tensor(grow(i1, expand1), grow(i2, expand2)),
                        grow(i3, expand3))
    return aten.sum.dim_IntList(p, list(sumdim)) if sumdim else p


def _angle(x):
    # real input: pi where negative, 0 elsewhere, NaN kept (ATen's angle_impl)
    if not x.is_floating_point():
        x = aten._to_copy.default(x, dtype=torch.get_default_dtype())
    pi = aten.full_like.default(x, math.pi)
    zero = aten.full_like.default(x, 0.0)
    return aten.where.self(aten.isnan.default(x), x,
                           aten.where.self(aten.lt.Scalar(x, 0), pi, zero))


def _kth_along(x, dim, k, keepdim):
    """Values and indices of the element of rank ``k`` (a 0-based int, or an int64 tensor of
    the reduced shape with keepdim) along ``dim``, NaN ranked largest (as ATen's selection
    and sort)."""
    dim = dim % max(x.dim(), 1)
    if x.dim() == 0:
        return x.clone(), aten.zeros_like.default(x, dtype=torch.int64)
    vals, idx = aten.sort.default(x, dim)
    if isinstance(k, int):
        v = aten.slice.Tensor(vals, dim, k, k + 1)
        i = aten.slice.Tensor(idx, dim, k, k + 1)
    else:
        v = aten.gather.default(vals, dim, k)
        i = aten.gather.default(idx, dim, k)
    if not keepdim:
        v, i = aten.squeeze.dims(v, [dim]), aten.squeeze.dims(i, [dim])
    return v, i


def _kthvalue(x, k, dim=-1, keepdim=False):
    return _kth_along(x, dim, k - 1, keepdim)


def _median_dim(x, dim, keepdim=False):
    # the lower median; a slice with a NaN gives NaN (sorted last)
    d = dim % max(x.dim(), 1)
    n = x.shape[d] if x.dim() else 1
    v, i = _kth_along(x, dim, (n - 1) // 2, True)
    if x.dim():
        lv, li = _kth_along(x, dim, n - 1, True)
        nan = aten.isnan.default(lv)
        v, i = aten.where.self(nan, lv, v), aten.where.self(nan, li, i)
        if not keepdim:
            v, i = aten.squeeze.dims(v, [d]), aten.squeeze.dims(i, [d])
    return v, i


def _median(x):
    return _median_dim(aten.view.default(x, [-1]), 0)[0] if x.numel() else \
        aten.full.default([], math.nan, dtype=x.dtype)


def _nanmedian_dim(x, dim, keepdim=False):
    # the lower median of the non-NaN values (NaN sorts last); all NaN gives NaN
    if x.dim() == 0:
        return x.clone(), aten.zeros_like.default(x, dtype=torch.int64)
    d = dim % x.dim()
    count = aten.sum.dim_IntList(aten.logical_not.default(aten.isnan.default(x)), [d], True)
    k = aten.clamp.default(aten.div.Tensor_mode(aten.sub.Tensor(count, 1), 2,
                                                rounding_mode="floor"), 0)
    return _kth_along(x, d, k, keepdim)


def _nanmedian(x):
    return _nanmedian_dim(aten.view.default(x, [-1]), 0)[0] if x.numel() else \
        aten.full.default([], math.nan, dtype=x.dtype)


def _diagonal_scatter(self, src, offset=0, dim1=0, dim2=1):
    # a copy of self with src written on the diagonal: index_put at the diagonal's positions
    # of the two dimensions moved first
    nd = self.dim()
    d1, d2 = dim1 % nd, dim2 % nd
    n = src.shape[-1]
    rest = [d for d in range(nd) if d not in (d1, d2)]
    x = aten.permute.default(self, [d1, d2] + rest)
    rows = aten.arange.start_step(max(-offset, 0), max(-offset, 0) + n, 1, dtype=torch.int64)
    cols = aten.arange.start_step(max(offset, 0), max(offset, 0) + n, 1, dtype=torch.int64)
    v = aten.permute.default(src, [src.dim() - 1] + list(range(src.dim() - 1)))
    y = aten.index_put.default(x, [rows, cols], v)
    inv = [0] * nd
    for i, d in enumerate([d1, d2] + rest):
        inv[d] = i
    return aten.permute.default(y, inv)


def _adaptive_max_pool2d(x, output_size):
    # torch's decomposition covers global pooling and evenly divisible sizes; otherwise each
    # output cell's window ([floor(i*I/O), ceil((i+1)*I/O)) on each axis) is a slice, its
    # maximum and the flat index (h * W + w) of its first maximum (NaN counts as the
    # maximum), as ATen's kernel
    from torch._decomp import decomposition_table
    r = decomposition_table[aten.adaptive_max_pool2d.default](x, output_size)
    if r is not NotImplemented:
        return r
    h_in, w_in = x.shape[-2], x.shape[-1]
    h_out, w_out = output_size
    vals, idxs = [], []
    for i in range(h_out):
        hs, he = (i * h_in) // h_out, -((-(i + 1) * h_in) // h_out)
        for j in range(w_out):
            ws, we = (j * w_in) // w_out, -((-(j + 1) * w_in) // w_out)
            win = aten.slice.Tensor(aten.slice.Tensor(x, -2, hs, he), -1, ws, we)
            flat = aten.view.default(aten.clone.default(win), list(x.shape[:-2]) + [-1])
            a = aten.argmax.default(flat, -1, True)
            vals.append(aten.gather.default(flat, -1, a))
            kw = we - ws
            row = aten.add.Tensor(aten.div.Tensor_mode(a, kw, rounding_mode="floor"), hs)
            col = aten.add.Tensor(aten.remainder.Scalar(a, kw), ws)
            idxs.append(aten.add.Tensor(aten.mul.Tensor(row, w_in), col))
    shape = list(x.shape[:-2]) + [h_out, w_out]
    return (aten.view.default(aten.cat.default(vals, -1), shape),
            aten.view.default(aten.cat.default(idxs, -1), shape))


def _adaptive_max_pool2d_backward(grad_output, x, indices):
    # each output's gradient added at the input position its index names
    flat_shape = list(x.shape[:-2]) + [-1]
    zeros = aten.full.default(list(x.shape[:-2]) + [x.shape[-2] * x.shape[-1]], 0.0,
                              dtype=grad_output.dtype)
    g = aten.scatter_add.default(zeros, -1, aten.view.default(indices, flat_shape),
                                 aten.view.default(grad_output, flat_shape))
    return aten.view.default(g, list(x.shape))


def _as_strided_scatter(self, src, size, stride, storage_offset=None):
    # src written at the positions the strided view of self's (contiguous) storage names
    if not self.is_contiguous():
        return NotImplemented
    n = self.numel()
    pos = aten.as_strided.default(aten.arange.start_step(0, n, 1, dtype=torch.int64), size,
                                  stride, storage_offset or 0)
    out = aten.index_put.default(aten.view.default(self, [-1]),
                                 [aten.reshape.default(pos, [-1])],
                                 aten.reshape.default(src, [-1]))
    return aten.view.default(out, list(self.shape))


def _frexp(x):
    # mantissa in [0.5, 1) and exponent with x = m * 2^e: e from log2, corrected by one step
    # either way (log2 may round across a power of two); the scaling by 2^-e in two halves
    # so that no factor overflows; 0, inf and NaN give (x, 0), as ATen
    xf = aten._to_copy.default(x, dtype=torch.float32) if x.dtype in (
        torch.bfloat16, torch.float16) else x
    a = aten.abs.default(xf)
    ok = aten.logical_and.default(aten.ne.Scalar(a, 0.0), aten.logical_and.default(
        aten.logical_not.default(aten.isinf.default(xf)), aten.eq.Tensor(xf, xf)))
    safe = aten.where.self(ok, a, aten.full_like.default(a, 1.0))
    e = aten.add.Tensor(aten.floor.default(aten.log2.default(safe)), 1.0)
    h = aten.floor.default(aten.div.Tensor(e, 2.0))
    m = aten.mul.Tensor(aten.mul.Tensor(xf, aten.exp2.default(aten.neg.default(h))),
                        aten.exp2.default(aten.neg.default(aten.sub.Tensor(e, h))))
    big = aten.ge.Scalar(aten.abs.default(m), 1.0)
    m = aten.where.self(big, aten.mul.Tensor(m, 0.5), m)
    e = aten.where.self(big, aten.add.Tensor(e, 1.0), e)
    small = aten.logical_and.default(aten.lt.Scalar(aten.abs.default(m), 0.5), ok)
    m = aten.where.self(small, aten.mul.Tensor(m, 2.0), m)
    e = aten.where.self(small, aten.sub.Tensor(e, 1.0), e)
    m = aten.where.self(ok, m, xf)
    e = aten.where.self(ok, e, aten.zeros_like.default(e))
    return (aten._to_copy.default(m, dtype=x.dtype),
            aten._to_copy.default(e, dtype=torch.int32))


def _masked_scatter_backward(grad_output, mask, sizes):
    # the gradient at the mask's positions, in order, zeros after (ATen: masked_select, padded)
    n = 1
    for d in sizes:
        n *= d
    m = aten.reshape.default(aten.expand.default(mask, list(grad_output.shape)), [-1])
    g = aten.reshape.default(grad_output, [-1])
    pos = aten.sub.Tensor(aten.cumsum.default(m, 0, dtype=torch.int64), 1)
    target = aten.where.self(m, pos, aten.full_like.default(pos, n))
    buf = aten.full.default([n + 1], 0.0, dtype=grad_output.dtype)
    # every True position is written once; the others all land on the extra last slot
    buf = aten.index_put.default(buf, [target], g)
    return aten.view.default(aten.slice.Tensor(buf, 0, 0, n), list(sizes))


def _logcumsumexp(x, dim):
    # in float64, shifted by the slice's largest finite value (ATen accumulates in the input
    # type); an empty or 0-d input as it is
    if x.dim() == 0 or x.numel() == 0:
        return aten.clone.default(x)
    xd = aten._to_copy.default(x, dtype=torch.float64)
    m = aten.amax.default(xd, [dim], True)
    m = aten.where.self(aten.isinf.default(m), aten.zeros_like.default(m), m)
    r = aten.add.Tensor(aten.log.default(aten.cumsum.default(
        aten.exp.default(aten.sub.Tensor(xd, m)), dim)), m)
    return aten._to_copy.default(r, dtype=x.dtype)


def _nonzero_static(x, *, size, fill_value=-1):
    # the coordinates of the first `size` nonzero elements in row-major order, rows past the
    # count filled with fill_value: each element's row is the count of nonzeros before it
    nd, n = x.dim(), x.numel()
    flat = aten.ne.Scalar(aten.reshape.default(x, [-1]), 0)
    pos = aten.sub.Tensor(aten.cumsum.default(flat, 0, dtype=torch.int64), 1)
    keep = aten.logical_and.default(flat, aten.lt.Scalar(pos, size))
    target = aten.where.self(keep, pos, aten.full_like.default(pos, size))
    i = aten.arange.start_step(0, n, 1, dtype=torch.int64)
    coords, stride = [], 1
    for d in reversed(range(nd)):
        c = aten.remainder.Scalar(aten.div.Tensor_mode(i, stride, rounding_mode="floor"),
                                  x.shape[d])
        coords.insert(0, aten.unsqueeze.default(c, 1))
        stride *= x.shape[d]
    buf = aten.full.default([size + 1, nd], fill_value, dtype=torch.int64)
    if nd == 0 or n == 0:
        return aten.slice.Tensor(buf, 0, 0, size)
    buf = aten.index_put.default(buf, [target], aten.cat.default(coords, 1))
    return aten.slice.Tensor(buf, 0, 0, size)


def _trisolve(a, b, upper, unit=False):
    """X with A X = B for triangular A [..., n, n] and B [..., n, k], by substitution (row by
    row: the same sums as a triangular solve, in another order)."""
    n = a.shape[-1]
    rows = [None] * n
    order = range(n - 1, -1, -1) if upper else range(n)
    for i in order:
        r = aten.slice.Tensor(b, -2, i, i + 1)
        done = [j for j in (range(i + 1, n) if upper else range(i))]
        if done:
            coef = aten.slice.Tensor(aten.slice.Tensor(a, -2, i, i + 1), -1, done[0],
                                     done[-1] + 1)
            xs = aten.cat.default([rows[j] for j in done], -2)
            r = aten.sub.Tensor(r, aten.matmul.default(coef, xs))
        if not unit:
            r = aten.div.Tensor(r, aten.slice.Tensor(aten.slice.Tensor(a, -2, i, i + 1), -1, i,
                                                     i + 1))
        rows[i] = r
    return aten.cat.default(rows, -2) if n else aten.clone.default(b)


def _mT(x):
    return aten.transpose.int(x, -2, -1)


def _broadcast_batch(a, b):
    batch = torch.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    return (aten.expand.default(a, list(batch) + list(a.shape[-2:])),
            aten.expand.default(b, list(batch) + list(b.shape[-2:])))


def _linalg_solve_triangular(a, b, *, upper, left=True, unitriangular=False):
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return _mT(_linalg_solve_triangular(_mT(a), _mT(b), upper=not upper,
                                            unitriangular=unitriangular))
    a, b = _broadcast_batch(a, b)
    return _trisolve(a, b, upper, unitriangular)


def _triangular_solve(b, a, upper=True, transpose=False, unitriangular=False):
    a2, b2 = _broadcast_batch(a, b)
    x = _trisolve(_mT(a2) if transpose else a2, b2, upper != transpose, unitriangular)
    return x, aten.clone.default(a2)


def _cholesky_solve(b, l, upper=False):
    # A = L L^T (or U^T U): L Y = B, then L^T X = Y
    l, b = _broadcast_batch(l, b)
    low = _mT(l) if upper else l
    return _trisolve(_mT(low), _trisolve(low, b, False), True)


def _cholesky_inverse(l, upper=False):
    n = l.shape[-1]
    eye = aten.expand.default(aten.eye.default(n, dtype=l.dtype), list(l.shape))
    return _cholesky_solve(eye, l, upper)


def _linalg_pinv(a, *, atol=None, rtol=None, hermitian=False):
    # ATen's linalg_pinv (LinearAlgebra.cpp) op for op, on _linalg_svd / _linalg_eigh
    if a.numel() == 0:
        shape = list(a.shape)
        shape[-1], shape[-2] = shape[-2], shape[-1]
        return aten.full.default(shape, 0, dtype=a.dtype)
    f64 = torch.float64
    atol_t = atol if atol is not None else aten.full.default([], 0, dtype=f64)
    if rtol is not None:
        rtol_t = rtol
    else:
        eps = torch.finfo(a.dtype).eps * max(a.shape[-1], a.shape[-2])
        rtol_t = aten.full.default([], eps, dtype=f64)
        if atol is not None:
            rtol_t = aten.where.self(aten.gt.Scalar(atol, 0), aten.full.default([], 0, dtype=f64),
                                     rtol_t)
    zero = aten.full.default([], 0, dtype=a.dtype)
    if hermitian:
        s, u = aten._linalg_eigh.default(a, "L", True)
        s_abs = aten.abs.default(s)
        max_val = aten.amax.default(s_abs, [-1], True)
        tol = aten.maximum.default(aten.unsqueeze.default(atol_t, -1),
                                   aten.mul.Tensor(aten.unsqueeze.default(rtol_t, -1), max_val))
        s_inv = aten.where.self(aten.gt.Tensor(s_abs, tol), aten.reciprocal.default(s), zero)
        return aten.matmul.default(aten.mul.Tensor(u, aten.unsqueeze.default(s_inv, -2)), _mT(u))
    u, s, vh = aten._linalg_svd.default(a, False, True)
    max_val = aten.slice.Tensor(s, -1, 0, 1)
    tol = aten.maximum.default(aten.unsqueeze.default(atol_t, -1),
                               aten.mul.Tensor(aten.unsqueeze.default(rtol_t, -1), max_val))
    s_inv = aten.where.self(aten.gt.Tensor(s, tol), aten.reciprocal.default(s), zero)
    return aten.matmul.default(aten.mul.Tensor(_mT(vh), aten.unsqueeze.default(s_inv, -2)),
                               _mT(u))


def _linalg_matrix_sqrth(a):
    # V diag(sqrt(max(w, 0))) V^T of the lower triangle's eigendecomposition (eager clamps
    # negative eigenvalues to 0 as well)
    w, v = aten._linalg_eigh.default(a, "L", True)
    root = aten.sqrt.default(aten.clamp.default(w, 0))
    return aten.matmul.default(aten.mul.Tensor(v, aten.unsqueeze.default(root, -2)), _mT(v))


def _linalg_polar(a):
    # A = W S Vh: U = W Vh, H = Vh^T diag(S) Vh (the CPU's SVD-based computation)
    w, s, vh = aten._linalg_svd.default(a, False, True)
    u = aten.matmul.default(w, vh)
    h = aten.matmul.default(aten.mul.Tensor(_mT(vh), aten.unsqueeze.default(s, -2)), vh)
    return u, h


def _lu_det_p(pivots):
    # ATen's lu_det_P: the sign of the permutation of LAPACK pivots, as i64 +-1
    n = pivots.shape[-1]
    moved = aten.ne.Tensor(aten.arange.start_step(1, n + 1, dtype=pivots.dtype), pivots)
    odd = aten.remainder.Scalar(aten.sum.dim_IntList(moved, [-1], False, dtype=torch.int64), 2)
    return aten.add.Scalar(aten.mul.Scalar(odd, -2), 1)


def _lu_of(a):
    # ATen factors A^T when A is contiguous (det(A^T) = det(A); lu_factor wants F-contiguous
    # input): its LU and pivot outputs, and the backward formulas, depend on that choice
    use_t = a.is_contiguous()
    lu, piv, info = aten.linalg_lu_factor_ex.default(_mT(a) if use_t else a)
    return use_t, lu, piv, info


def _linalg_det(a):
    _, lu, piv, _ = _lu_of(a)
    diag = aten.diagonal.default(lu, 0, -2, -1)
    return aten.mul.Tensor(_lu_det_p(piv), aten.prod.dim_int(diag, -1)), lu, piv


def _linalg_slogdet(a):
    _, lu, piv, _ = _lu_of(a)
    diag = aten.diagonal.default(lu, 0, -2, -1)
    sign = aten.mul.Tensor(aten.prod.dim_int(aten.sign.default(diag), -1), _lu_det_p(piv))
    logabs = aten.sum.dim_IntList(aten.log.default(aten.abs.default(diag)), [-1])
    return sign, logabs, lu, piv


def stride_dependent() -> Dict[Callable, Callable]:
    """Ops of fxhlo's table that the backend decomposes all the same, because ATen's result
    depends on the input's strides, which only a decomposition sees: ``_linalg_det`` and
    ``_linalg_slogdet`` factor ``A^T`` when ``A`` is contiguous (their LU and pivot outputs,
    which the backward formulas read, are those of ``A^T`` then); these decompositions do as
    ATen does, on ``linalg_lu_factor_ex``.  (``_linalg_solve_ex``'s LU is that of ``A``
    whatever its strides: the op table's kernel computes it.)"""
    return {
        aten._linalg_det.default: _linalg_det,
        aten._linalg_slogdet.default: _linalg_slogdet,
    }


def _scatter_grad(grad, self_shape, index, dims):
    # the gradient of a gather from the last `dims` dimensions of an input of `self_shape`
    # at flat `index` (broadcast to grad's shape): a scatter_add into zeros
    lead = list(self_shape[:len(self_shape) - dims])
    inner = math.prod(self_shape[len(self_shape) - dims:])
    g = aten.view.default(grad, list(grad.shape[:grad.dim() - dims]) + [-1])
    idx = aten.expand.default(aten.view.default(index, [-1]) if index.dim() == dims
                              else aten.view.default(index, list(g.shape)), list(g.shape))
    out = aten.scatter_add.default(aten.full.default(lead + [inner], 0, dtype=grad.dtype),
                                   -1, aten.clone.default(idx), g)
    return aten.view.default(out, list(self_shape))


def _max_pool3d_with_indices_backward(grad, x, kernel_size, stride, padding, dilation,
                                      ceil_mode, indices):
    # each output's gradient added at its argmax (flat over D*H*W, as the indices are)
    return _scatter_grad(grad, x.shape, indices, 3)


def _replicate_index(n_out, n_in, before):
    i = aten.arange.start_step(0, n_out, dtype=torch.int64)
    return aten.clamp.default(aten.sub.Scalar(i, before), 0, n_in - 1)


def _replication_pad1d_backward(grad, x, padding):
    return _scatter_grad(grad, x.shape, _replicate_index(grad.shape[-1], x.shape[-1],
                                                         padding[0]), 1)


def _replication_pad2d_backward(grad, x, padding):
    h, w = x.shape[-2], x.shape[-1]
    ih = _replicate_index(grad.shape[-2], h, padding[2])
    iw = _replicate_index(grad.shape[-1], w, padding[0])
    flat = aten.add.Tensor(aten.mul.Scalar(aten.unsqueeze.default(ih, -1), w), iw)
    return _scatter_grad(grad, x.shape, flat, 2)


def _segment_reduce(data, reduce, *, lengths=None, indices=None, offsets=None, axis=0,
                    unsafe=False, initial=None):
    # 1-D lengths or offsets: each element's segment by searchsorted of the segment ends, then
    # a scatter_reduce from the initial value (ATen's: `initial`, or the reduction's
    # identity), mean = (initial + sum) / length, an empty segment without initial NaN
    if indices is not None or (lengths if lengths is not None else offsets) is None:
        return NotImplemented
    bounds = lengths if lengths is not None else offsets
    if bounds.dim() != 1 or reduce not in ("max", "min", "sum", "prod", "mean"):
        return NotImplemented
    axis = axis % data.dim()
    if lengths is not None:
        ends = aten.cumsum.default(lengths, 0)
        starts = aten.sub.Tensor(ends, lengths)
        lens = lengths
    else:
        starts = aten.slice.Tensor(offsets, 0, 0, offsets.shape[0] - 1)
        ends = aten.slice.Tensor(offsets, 0, 1, offsets.shape[0])
        lens = aten.sub.Tensor(ends, starts)
    nseg, n = ends.shape[0], data.shape[axis]
    j = aten.arange.start_step(0, n, 1, dtype=ends.dtype)
    seg = aten.searchsorted.Tensor(ends, j, right=True)
    segc = aten.clamp.default(seg, 0, max(nseg - 1, 0))
    valid = aten.logical_and.default(aten.lt.Scalar(seg, nseg), aten.ge.Tensor(
        j, aten.index_select.default(starts, 0, segc)))
    seg = aten.where.self(valid, seg, aten.full_like.default(seg, nseg))
    ident = {"max": -math.inf, "min": math.inf, "sum": 0.0, "prod": 1.0, "mean": 0.0}[reduce]
    init = ident if initial is None else initial
    shape = list(data.shape)
    shape[axis] = nseg + 1
    out = aten.full.default(shape, init, dtype=data.dtype)
    view = [1] * data.dim()
    view[axis] = n
    index = aten.expand.default(aten.view.default(seg, view), list(data.shape))
    how = {"max": "amax", "min": "amin", "sum": "sum", "prod": "prod", "mean": "sum"}[reduce]
    out = aten.scatter_reduce.two(out, axis, index, data, how, include_self=True)
    if how in ("amax", "amin"):  # a NaN in a segment gives NaN (ATen's loop keeps it)
        nan = aten.scatter_reduce.two(
            aten.full.default(shape, 0.0, dtype=data.dtype), axis, index,
            aten._to_copy.default(aten.isnan.default(data), dtype=data.dtype), "amax",
            include_self=True)
        out = aten.where.self(aten.gt.Scalar(nan, 0), aten.full_like.default(out, math.nan),
                              out)
    out = aten.slice.Tensor(out, axis, 0, nseg)
    if reduce == "mean":
        lv = [1] * data.dim()
        lv[axis] = nseg
        lf = aten.view.default(aten._to_copy.default(lens, dtype=data.dtype), lv)
        pos = aten.gt.Scalar(lf, 0)
        out = aten.where.self(pos, aten.div.Tensor(out, aten.where.self(
            pos, lf, aten.full_like.default(lf, 1.0))), out)
        if initial is None:
            out = aten.where.self(pos, out, aten.full_like.default(out, math.nan))
    return out


def _convert_element_type(x, dtype):
    # what torch's references emit for a dtype conversion (linalg.vector_norm in a wider
    # accumulation type, e.g. renorm of bf16): the same conversion as ATen's _to_copy
    return aten._to_copy.default(x, dtype=dtype)


def table() -> Dict[torch._ops.OpOverload, Callable]:
    """The decompositions, by op overload."""
    return {
        aten.view_copy.default: _view_copy,
        aten.permute_copy.default: _permute_copy,
        aten.narrow_copy.default: _narrow_copy,
        aten.as_strided_copy.default: _as_strided_copy,
        aten.unbind_copy.int: _unbind_copy,
        aten.max.default: _max_all,
        aten.min.default: _min_all,
        aten.fmax.default: _fmax,
        aten.fmin.default: _fmin,
        aten.hypot.default: _hypot,
        aten.addbmm.default: _addbmm,
        aten.index_reduce.default: _index_reduce,
        aten.scatter.reduce: _scatter_reduce_src,
        aten.scatter.value_reduce: _scatter_reduce_value,
        aten.put.default: _put,
        aten.bucketize.Tensor: _bucketize,
        aten.new_empty_strided.default: _new_empty_strided,
        aten.rand_like.default: _rand_like,
        aten.randn_like.default: _randn_like,
        aten.bernoulli.p: _bernoulli_p,
        aten.exponential.default: _exponential,
        aten.cauchy.default: _cauchy,
        aten.log_normal.default: _log_normal,
        aten.geometric.default: _geometric,
        aten.uniform.default: _uniform,
        aten.normal.Tensor_Tensor: _normal_tt,
        aten.normal.Tensor_float: _normal_tf,
        aten.normal.float_Tensor: _normal_ft,
        aten.normal.float_float: _normal_ff,
        aten.normal_functional.default: _normal_functional,
        aten.randint.default: _randint,
        aten.randint.low: _randint_low,
        aten.randint_like.default: _randint_like,
        aten.randint_like.low_dtype: _randint_like_low,
        aten._trilinear.default: _trilinear,
        aten.angle.default: _angle,
        aten.kthvalue.default: _kthvalue,
        aten.median.default: _median,
        aten.median.dim: _median_dim,
        aten.nanmedian.default: _nanmedian,
        aten.nanmedian.dim: _nanmedian_dim,
        aten.diagonal_scatter.default: _diagonal_scatter,
        aten.adaptive_max_pool2d.default: _adaptive_max_pool2d,
        aten.adaptive_max_pool2d_backward.default: _adaptive_max_pool2d_backward,
        aten.as_strided_scatter.default: _as_strided_scatter,
        aten.frexp.Tensor: _frexp,
        aten.masked_scatter_backward.default: _masked_scatter_backward,
        aten.logcumsumexp.default: _logcumsumexp,
        aten.nonzero_static.default: _nonzero_static,
        aten.linalg_solve_triangular.default: _linalg_solve_triangular,
        aten.triangular_solve.default: _triangular_solve,
        aten.cholesky_solve.default: _cholesky_solve,
        aten.cholesky_inverse.default: _cholesky_inverse,
        aten.segment_reduce.default: _segment_reduce,
        aten.max_pool3d_with_indices_backward.default: _max_pool3d_with_indices_backward,
        aten.replication_pad1d_backward.default: _replication_pad1d_backward,
        aten.replication_pad2d_backward.default: _replication_pad2d_backward,
        aten.linalg_pinv.atol_rtol_tensor: _linalg_pinv,
        aten.linalg_matrix_sqrth.default: _linalg_matrix_sqrth,
        aten.linalg_polar.default: _linalg_polar,
        torch.ops.prims.convert_element_type.default: _convert_element_type,
    }
