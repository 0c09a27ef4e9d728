"""fxhlo.extra_decomps: each decomposition against the op it replaces, in eager (exact match,
NaN where the op gives NaN), and through the torch.compile backend in strict mode."""

from __future__ import annotations

import math

import pytest
import torch

from fxhlo import extra_decomps

aten = torch.ops.aten


def _x(*shape, seed=0, nan=False):
    g = torch.Generator().manual_seed(seed)
    t = torch.randn(*shape, generator=g)
    if nan and t.numel() > 2:
        t.view(-1)[1] = math.nan
    return t


CASES = [
    (aten.view_copy.default, (_x(2, 6), [3, 4]), {}),
    (aten.permute_copy.default, (_x(2, 3, 4), [2, 0, 1]), {}),
    (aten.narrow_copy.default, (_x(5, 4), 0, 1, 3), {}),
    (aten.as_strided_copy.default, (_x(4, 4), [2, 2], [1, 4], 1), {}),
    (aten.unbind_copy.int, (_x(3, 2), 1), {}),
    (aten.max.default, (_x(3, 4, nan=True),), {}),
    (aten.max.default, (_x(3, 4),), {}),
    (aten.min.default, (_x(3, 4),), {}),
    (aten.fmax.default, (_x(3, 4, nan=True), _x(4, seed=1, nan=True)), {}),
    (aten.fmin.default, (_x(3, 4, nan=True), _x(4, seed=1)), {}),
    (aten.hypot.default, (_x(3, 4), _x(3, 4, seed=2)), {}),
    (aten.addbmm.default, (_x(3, 5), _x(2, 3, 4, seed=1), _x(2, 4, 5, seed=2)), {}),
    (aten.addbmm.default, (_x(3, 5), _x(2, 3, 4, seed=1), _x(2, 4, 5, seed=2)),
     {"beta": 0.5, "alpha": 2}),
    (aten.addbmm.default, (torch.full((3, 5), math.nan), _x(2, 3, 4, seed=1),
                           _x(2, 4, 5, seed=2)), {"beta": 0}),
    (aten.scatter.reduce, (_x(3, 5), 1, torch.tensor([[0, 1, 0], [2, 2, 4], [1, 1, 1]]),
                           _x(3, 3, seed=1)), {"reduce": "add"}),
    (aten.scatter.reduce, (_x(3, 5), 1, torch.tensor([[0, 1, 0], [2, 2, 4], [1, 1, 1]]),
                           _x(3, 3, seed=1)), {"reduce": "multiply"}),
    (aten.scatter.value_reduce, (_x(3, 5), 0, torch.tensor([[0, 1, 2, 0, 1]]), 1.5),
     {"reduce": "multiply"}),
    (aten.put.default, (_x(3, 4), torch.tensor([0, -1, 5]), _x(3, seed=1)), {}),
    (aten.put.default, (_x(3, 4), torch.tensor([[0, 5], [5, 11]]), _x(2, 2, seed=1), True), {}),
    (aten.bucketize.Tensor, (_x(3, 4), torch.tensor([-1.0, 0.0, 0.5, 2.0])), {}),
    (aten.bucketize.Tensor, (_x(3, 4), torch.tensor([-1.0, 0.0, 0.5, 2.0])),
     {"right": True, "out_int32": True}),
]
_mp_x = _x(2, 3, 6, 7, 8)
_mp_out, _mp_idx = aten.max_pool3d_with_indices.default(_mp_x, [2, 2, 2], [2, 2, 2])
_rp_x = _x(2, 5, 6)
CASES += [
    (aten._trilinear.default, (_x(2, 3), _x(4, 3, 5, seed=1), _x(2, 5, seed=2), [1, 3], [0],
                               [1, 2], [2, 3]), {}),
    (aten.angle.default, (_x(3, 4, nan=True),), {}),
    (aten.kthvalue.default, (_x(3, 6), 2, 1), {}),
    (aten.kthvalue.default, (_x(3, 6, nan=True), 3, 0, True), {}),
    (aten.median.default, (_x(3, 6),), {}),
    (aten.median.default, (_x(3, 6, nan=True),), {}),
    (aten.median.dim, (_x(4, 5, nan=True), 1), {}),
    (aten.median.dim, (_x(3, 6), 0, True), {}),
    (aten.nanmedian.default, (_x(4, 5, nan=True),), {}),
    (aten.nanmedian.dim, (_x(4, 5, nan=True), 1), {}),
    (aten.nanmedian.dim, (torch.full((3, 2), math.nan), 0, True), {}),
    (aten.diagonal_scatter.default, (_x(4, 5), _x(4, seed=1), 1), {}),
    (aten.diagonal_scatter.default, (_x(2, 4, 5), _x(4, 1, seed=1), -1, 0, 2), {}),
    (aten.max_pool3d_with_indices_backward.default,
     (_x(*_mp_out.shape, seed=1), _mp_x, [2, 2, 2], [2, 2, 2], [0, 0, 0], [1, 1, 1], False,
      _mp_idx), {}),
    (aten.replication_pad1d_backward.default, (_x(2, 5, 11, seed=1), _rp_x, [2, 3]), {}),
    (aten.replication_pad1d_backward.default, (_x(2, 5, 7, seed=1), _rp_x, [-1, 2]), {}),
    (aten.replication_pad2d_backward.default, (_x(2, 8, 11, seed=1), _rp_x, [2, 3, 1, 2]), {}),
    (aten.replication_pad2d_backward.default, (_x(2, 6, 7, seed=1), _rp_x, [-1, 2, 3, -2]), {}),
]
for r in ("prod", "mean", "amax", "amin"):
    for inc in (True, False):
        CASES.append((aten.index_reduce.default, (_x(4, 3), 0, torch.tensor([0, 2, 0, 3, 0]),
                                                  _x(5, 3, seed=1), r), {"include_self": inc}))
        CASES.append((aten.index_reduce.default, (_x(3, 4), -1, torch.tensor([1, 1, 3]),
                                                  _x(3, 3, seed=2), r), {"include_self": inc}))


@pytest.mark.parametrize("op,args,kwargs", CASES, ids=lambda v: str(v)[:40])
def test_decomposition_matches_op(op, args, kwargs):
    fn = extra_decomps.table()[op]
    want = op(*args, **kwargs)
    got = fn(*args, **kwargs)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        pairs = list(zip(got, want))
    else:
        pairs = [(got, want)]
    for g, w in pairs:
        assert g.dtype == w.dtype and g.shape == w.shape
        torch.testing.assert_close(g, w, rtol=1e-6, atol=1e-6, equal_nan=True)


def test_random_decompositions_have_the_right_type():
    x = _x(64, 64)
    t = extra_decomps.table()
    for op in (aten.rand_like.default, aten.randn_like.default):
        r = t[op](x)
        assert r.shape == x.shape and r.dtype == x.dtype
    b = t[aten.bernoulli.p](x, 0.25)
    assert b.dtype == x.dtype and set(b.unique().tolist()) <= {0.0, 1.0}
    assert abs(b.mean().item() - 0.25) < 0.05
    e = t[aten.new_empty_strided.default](x, [2, 3], [3, 1])
    assert e.shape == (2, 3) and e.dtype == x.dtype


def test_compiled_through_the_backend(tmp_path):
    """The decompositions produce graphs fxhlo compiles whole (strict mode)."""
    def f(x, y, idx, edges):
        a = torch.fmax(x, y) + torch.hypot(x, y)
        b = torch.index_reduce(x, 0, idx, y, "amax")
        return a, b, torch.max(x), torch.bucketize(x, edges)

    x, y = _x(4, 3), _x(4, 3, seed=1)
    idx = torch.tensor([0, 2, 0, 1])
    edges = torch.tensor([-0.5, 0.0, 0.5])
    torch._dynamo.reset()
    cf = torch.compile(f, backend="fxhlo", options={"strict": True, "cache": False})
    for g, w in zip(cf(x, y, idx, edges), f(x, y, idx, edges)):
        torch.testing.assert_close(g, w)


@pytest.mark.parametrize("shape,size", [((2, 3, 7, 9), (3, 4)), ((1, 5, 6), (4, 5)),
                                        ((2, 3, 8, 8), (4, 4))])
def test_adaptive_max_pool2d(shape, size):
    """Windows of uneven sizes (torch's decomposition gives up on them): the values, the flat
    indices of the first maximum (NaN counts as the maximum) and the backward, exactly as
    ATen's; compiled whole in strict mode with its gradient."""
    t = extra_decomps.table()
    x = _x(*shape, nan=True)
    want = aten.adaptive_max_pool2d.default(x, size)
    got = t[aten.adaptive_max_pool2d.default](x, size)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], want[1])
    go = _x(*want[0].shape, seed=3)
    torch.testing.assert_close(
        t[aten.adaptive_max_pool2d_backward.default](go, x, want[1]),
        aten.adaptive_max_pool2d_backward.default(go, x, want[1]), rtol=0, atol=0)
    xs = _x(*shape).requires_grad_(True)
    torch._dynamo.reset()
    f = torch.nn.functional.adaptive_max_pool2d
    cf = torch.compile(f, backend="fxhlo", options={"strict": True, "cache": False})
    out = cf(xs, size)
    (gx,) = torch.autograd.grad(out, xs, go)
    xe = xs.detach().clone().requires_grad_(True)
    oute = f(xe, size)
    (gxe,) = torch.autograd.grad(oute, xe, go)
    torch.testing.assert_close(out, oute)
    torch.testing.assert_close(gx, gxe)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_frexp_is_exact(dtype):
    """Mantissa and exponent bit for bit, at powers of two, the largest float, subnormals,
    signed zeros, infinities and NaN."""
    x = _x(4, 5) * 10
    x.view(-1)[:10] = torch.tensor([0.0, -0.0, math.inf, -math.inf, math.nan, 1e-42, 1.0, 0.5,
                                    3.4e38, -2.0 ** -126])
    x = x.to(dtype)
    want = aten.frexp.Tensor(x)
    got = extra_decomps.table()[aten.frexp.Tensor](x)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=0, equal_nan=True)
    assert torch.equal(got[1], want[1])


def test_scatters_and_logcumsumexp():
    """as_strided_scatter and masked_scatter_backward exactly; logcumsumexp (computed in
    float64) within assert_close's float32 tolerance, with -inf entries and an all -inf row."""
    t = extra_decomps.table()
    y, src = _x(3, 4), _x(2, 2, seed=1)
    torch.testing.assert_close(
        t[aten.as_strided_scatter.default](y, src, [2, 2], [1, 4], 1),
        aten.as_strided_scatter.default(y, src, [2, 2], [1, 4], 1), rtol=0, atol=0)
    g, mask = _x(3, 4, seed=2), _x(3, 4, seed=3) > 0
    torch.testing.assert_close(t[aten.masked_scatter_backward.default](g, mask, [4, 5]),
                               aten.masked_scatter_backward.default(g, mask, [4, 5]),
                               rtol=0, atol=0)
    z = _x(3, 6, seed=4) * 5
    z[0, 2] = -math.inf
    z[1] = -math.inf
    for d in (0, 1):
        torch.testing.assert_close(t[aten.logcumsumexp.default](z, d),
                                   aten.logcumsumexp.default(z, d))


def test_nonzero_static_and_triangular_solves():
    """nonzero_static exactly (fewer, as many and more rows than nonzeros, a fill value);
    the triangular solves (upper/lower, left/right, unit diagonal, transposed) and the
    Cholesky solve and inverse within assert_close's float32 tolerance of LAPACK's."""
    t = extra_decomps.table()
    x = torch.tensor([[0, 1.0, 0], [2, 0, 3.0]])
    for size, fill in ((2, -1), (3, -1), (6, 7)):
        assert torch.equal(t[aten.nonzero_static.default](x, size=size, fill_value=fill),
                           aten.nonzero_static.default(x, size=size, fill_value=fill))
    a = _x(2, 4, 4) + 4 * torch.eye(4)
    b = _x(2, 4, 3, seed=1)
    for up in (True, False):
        tri = a.triu() if up else a.tril()
        for left in (True, False):
            for unit in (True, False):
                bb = b if left else b.mT
                torch.testing.assert_close(
                    t[aten.linalg_solve_triangular.default](tri, bb, upper=up, left=left,
                                                            unitriangular=unit),
                    aten.linalg_solve_triangular.default(tri, bb, upper=up, left=left,
                                                         unitriangular=unit))
        for tr in (True, False):
            got = t[aten.triangular_solve.default](b, tri, up, tr)
            want = aten.triangular_solve.default(b, tri, up, tr)
            torch.testing.assert_close(got[0], want[0])
            torch.testing.assert_close(got[1], want[1])
    low = torch.linalg.cholesky(a @ a.mT)
    for up in (False, True):
        f = low.mT if up else low
        torch.testing.assert_close(t[aten.cholesky_solve.default](b, f, up),
                                   aten.cholesky_solve.default(b, f, up))
        torch.testing.assert_close(t[aten.cholesky_inverse.default](f, up),
                                   aten.cholesky_inverse.default(f, up))


def test_segment_reduce():
    """Every reduction, with and without an initial value, by lengths (an empty segment) and
    by offsets, a NaN in a segment: as ATen's, and compiled whole in strict mode."""
    op = aten.segment_reduce.default
    t = extra_decomps.table()[op]
    d = _x(7, 3)
    d[2, 1] = math.nan
    lengths, offsets = torch.tensor([2, 0, 3, 2]), torch.tensor([0, 2, 2, 5, 7])
    for red in ("max", "min", "sum", "prod", "mean"):
        for init in (None, 1.5):
            for kw in ({"lengths": lengths}, {"offsets": offsets}):
                torch.testing.assert_close(t(d, red, axis=0, initial=init, **kw),
                                           op(d, red, axis=0, initial=init, **kw),
                                           equal_nan=True)
    torch._dynamo.reset()

    def f(x, n):
        return torch.segment_reduce(x, "mean", lengths=n, axis=0)
    cf = torch.compile(f, backend="fxhlo", options={"strict": True, "cache": False})
    torch.testing.assert_close(cf(d, lengths), f(d, lengths), equal_nan=True)


def test_selections_and_bilinear_compile_whole():
    """kthvalue, median, nanmedian, bilinear, angle, diagonal_scatter, frexp,
    as_strided_scatter, logcumsumexp, nonzero_static and solve_triangular compile whole in
    strict mode (they were unsupported ops) and match eager (the indices where no ties)."""
    def f(x, a, b, w, d):
        return (torch.kthvalue(x, 2, 1), torch.median(x, 0), torch.nanmedian(x),
                torch.nn.functional.bilinear(a, b, w), torch.angle(x),
                torch.diagonal_scatter(x, d, 1), torch.frexp(x),
                torch.as_strided_scatter(x, d[:2], [2], [3], 1), torch.logcumsumexp(a, 1),
                torch.nonzero_static(d, size=3),
                torch.linalg.solve_triangular(w[0, :, :3].triu() + 4 * torch.eye(3), w[1],
                                              upper=True))

    x = _x(4, 5, nan=True)
    args = (x, _x(2, 3, seed=1), _x(2, 4, seed=2), _x(5, 3, 4, seed=3), _x(4, seed=4))
    torch._dynamo.reset()
    cf = torch.compile(f, backend="fxhlo", options={"strict": True, "cache": False})
    leaves = torch.utils._pytree.tree_leaves
    got, want = leaves(cf(*args)), leaves(f(*args))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True)


def test_random_distributions():
    """Sample moments of the random decompositions (4096 draws, loose 5-sigma-ish bounds)."""
    t = extra_decomps.table()
    x = torch.empty(64, 64)
    e = t[aten.exponential.default](x, 2.0)
    assert e.min() >= 0 and abs(e.mean().item() - 0.5) < 0.05
    u = t[aten.uniform.default](x, -2.0, 3.0)
    assert u.min() >= -2 and u.max() <= 3 and abs(u.mean().item() - 0.5) < 0.15
    ln = t[aten.log_normal.default](x, 0.0, 0.5)
    assert abs(ln.log().mean().item()) < 0.05 and abs(ln.log().std().item() - 0.5) < 0.05
    g = t[aten.geometric.default](x, 0.25)
    assert g.min() >= 1 and (g == g.round()).all() and abs(g.mean().item() - 4.0) < 0.3
    c = t[aten.cauchy.default](x, 1.0, 2.0)
    assert abs(c.median().item() - 1.0) < 0.2
    n = t[aten.normal.Tensor_Tensor](torch.full((64, 64), 3.0), torch.full((64,), 2.0))
    assert abs(n.mean().item() - 3.0) < 0.15 and abs(n.std().item() - 2.0) < 0.15
    n = t[aten.normal.float_float](-1.0, 0.5, [64, 64])
    assert n.dtype == torch.float32 and abs(n.mean().item() + 1.0) < 0.05
    r = t[aten.randint.low](-3, 4, [64, 64])
    assert r.dtype == torch.int64 and r.min() == -3 and r.max() == 3
    r = t[aten.randint_like.default](torch.zeros(64, 64, dtype=torch.int32), 5)
    assert r.dtype == torch.int32 and set(r.unique().tolist()) == {0, 1, 2, 3, 4}


def test_renorm_in_bf16_compiles_whole():
    """torch's reference of renorm takes the norm of bf16 in float32 through
    prims.convert_element_type, which fxhlo lacked (the bf16 OpInfo sample was refused)."""
    x = _x(3, 4, 5).to(torch.bfloat16)

    def f(x):
        return torch.renorm(x, 2, 1, 0.5)
    torch._dynamo.reset()
    cf = torch.compile(f, backend="fxhlo", options={"strict": True, "cache": False})
    torch.testing.assert_close(cf(x), f(x))
