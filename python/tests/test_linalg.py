"""Linear algebra through the torch.compile backend: the factorizations of the op table
(LU, Cholesky, LDL, QR, eigh, SVD, matrix_exp; float64 interpreter kernels), the functions
built on them, and the error checks eager makes (``with_effects(_linalg_check_errors)``)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("fxhlo._native")

pytestmark = pytest.mark.usefixtures("fresh_backend")


def _x(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g)


def _spd(n, batch=()):
    a = _x(*batch, n, n)
    return a @ a.mT + n * torch.eye(n)


def _strict(f):
    return torch.compile(f, backend="fxhlo", dynamic=False, fullgraph=True,
                         options={"strict": True, "cache": False})


CASES = [
    ("inv", torch.linalg.inv, (_x(2, 4, 4) + 4 * torch.eye(4),)),
    ("solve", torch.linalg.solve, (_x(4, 4) + 4 * torch.eye(4), _x(3, 4, 2, seed=1))),
    ("solve vector", torch.linalg.solve, (_x(4, 4) + 4 * torch.eye(4), _x(4, seed=1))),
    ("det", torch.linalg.det, (_x(3, 4, 4),)),
    ("slogdet", torch.linalg.slogdet, (_x(3, 4, 4),)),
    ("cholesky", torch.linalg.cholesky, (_spd(4, (2,)),)),
    ("cholesky upper", lambda a: torch.linalg.cholesky(a, upper=True), (_spd(3),)),
    ("lu_factor", torch.linalg.lu_factor, (_x(2, 3, 5),)),
    ("lu", torch.linalg.lu, (_x(5, 3),)),
    ("lu_solve", lambda a, b: torch.linalg.lu_solve(*torch.linalg.lu_factor(a), b, adjoint=True),
     (_x(4, 4), _x(4, 2, seed=1))),
    ("qr", torch.linalg.qr, (_x(5, 3),)),
    ("qr complete", lambda a: torch.linalg.qr(a, mode="complete"), (_x(2, 5, 3),)),
    ("geqrf", torch.geqrf, (_x(3, 5),)),
    ("householder_product", lambda a: torch.linalg.householder_product(*torch.geqrf(a)),
     (_x(5, 3),)),
    ("eigvalsh", torch.linalg.eigvalsh, (_spd(5),)),
    ("svdvals", torch.linalg.svdvals, (_x(2, 3, 5),)),
    ("pinv", torch.linalg.pinv, (_x(5, 3),)),
    ("pinv hermitian", lambda a: torch.linalg.pinv(a, hermitian=True), (_spd(4),)),
    ("matrix_exp", torch.linalg.matrix_exp, (_x(2, 4, 4),)),
    ("matrix_sqrth", torch.linalg.matrix_sqrth, (_spd(4),)),
    ("polar", torch.linalg.polar, (_x(5, 3),)),
    ("ormqr", lambda a, c: torch.ormqr(*torch.geqrf(a), c, left=False, transpose=True),
     (_x(4, 4), _x(2, 4, seed=1))),
    ("ldl", torch.linalg.ldl_factor, (_x(4, 4) + _x(4, 4).mT,)),
    ("ldl_solve", lambda a, b: torch.linalg.ldl_solve(*torch.linalg.ldl_factor(a), b),
     (_x(4, 4) + _x(4, 4).mT, _x(4, 2, seed=1))),
    ("empty", torch.linalg.inv, (torch.zeros(0, 3, 3),)),
]


@pytest.mark.parametrize("name,f,args", CASES, ids=[c[0] for c in CASES])
def test_compiled_whole_and_as_eager(name, f, args):
    """Each compiles whole in strict mode and gives eager's answer (integer outputs such as
    pivots exactly) within float32's tolerance."""
    from fxhlo.runner import STATS
    got = _strict(f)(*args)
    want = f(*args)
    got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
    for g, w in zip(got, want):
        if w.is_floating_point():
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        else:
            assert torch.equal(g, w), name
    assert all(gs.eager_partitions == 0 for gs in STATS.graphs.values())


def test_singular_matrix_raises_eagers_error():
    """A singular matrix raises eager's LinAlgError (same message) from the compiled program,
    which stays compiled; an invertible one after it runs compiled."""
    from fxhlo.runner import STATS
    f = _strict(torch.linalg.inv)
    sing = torch.tensor([[1.0, 2.0], [2.0, 4.0]])
    with pytest.raises(torch.linalg.LinAlgError) as want:
        torch.linalg.inv(sing)
    with pytest.raises(torch.linalg.LinAlgError) as got:
        f(sing)
    assert str(got.value) == str(want.value)
    ok = torch.tensor([[2.0, 1.0], [1.0, 3.0]])
    torch.testing.assert_close(f(ok), torch.linalg.inv(ok))
    assert STATS.fallback_graphs == 0
    with pytest.raises(torch.linalg.LinAlgError):
        _strict(torch.linalg.cholesky)(torch.tensor([[1.0, 2.0], [2.0, 1.0]]))


def test_eigenvectors_and_singular_vectors_up_to_sign():
    """eigh and svd: the values as eager's, the vectors as eager's up to the sign of each."""
    a = _spd(5)
    w, v = _strict(torch.linalg.eigh)(a)
    we, ve = torch.linalg.eigh(a)
    torch.testing.assert_close(w, we)
    s = torch.sign((v * ve).sum(0))
    torch.testing.assert_close(v * s, ve, rtol=1e-4, atol=1e-5)
    b = _x(4, 6)
    u, sv, vh = _strict(lambda x: torch.linalg.svd(x, full_matrices=False))(b)
    ue, se, vhe = torch.linalg.svd(b, full_matrices=False)
    torch.testing.assert_close(sv, se)
    s = torch.sign((u * ue).sum(0))
    torch.testing.assert_close(u * s, ue, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(vh * s.unsqueeze(-1), vhe, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("bshape", [(4,), (4, 2)])
def test_gradients_of_solve(bshape):
    """solve's backward reads the forward's LU (that of A, not A^T) with adjoint solves."""
    a = (_x(4, 4) + 4 * torch.eye(4)).requires_grad_()
    b = _x(*bshape, seed=1).requires_grad_()
    out = _strict(torch.linalg.solve)(a, b)
    g = _x(*out.shape, seed=2)
    got = torch.autograd.grad(out, (a, b), g)
    want = torch.autograd.grad(torch.linalg.solve(a, b), (a, b), g)
    for x, y in zip(got, want):
        torch.testing.assert_close(x, y, rtol=1e-4, atol=1e-5)


def test_gradients_of_inverse_and_det():
    """The backward graphs (matmuls and solves on the factorizations) compile whole; det's
    LU is that of A^T, as ATen factors a contiguous A."""
    a = (_x(4, 4) + 4 * torch.eye(4)).requires_grad_()
    f = _strict(lambda x: torch.linalg.inv(x).sum() + torch.linalg.det(x))
    f(a).backward()
    g = a.grad.clone()
    a.grad = None
    (torch.linalg.inv(a).sum() + torch.linalg.det(a)).backward()
    torch.testing.assert_close(g, a.grad, rtol=1e-4, atol=1e-5)
