"""PyTorch's OpInfo samples through the torch.compile backend (python/fxhlo/opinfo.py).

test_opinfo_ci_subset runs the deterministic subset of fxhlo.opinfo.ci_tasks() (every
OpInfo's first f32 forward sample, and one OpInfo in three forward+backward and bf16) in a
pool of 2 worker processes, and fails on a failure not in fxhlo/opinfo_xfail.py and on a listed
(OpInfo, mode) whose counted samples all pass.  The whole database at K=3
(``python -m fxhlo.opinfo --check-xfail``) is run by hand; docs/opinfo.md has its numbers.

Run from python/tests with FXHLO_BIN set (see test_backend.py).
"""

import os
import time

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("expecttest")  # op_db imports it

from fxhlo import opinfo  # noqa: E402
from fxhlo.opinfo_xfail import XFAIL  # noqa: E402

JOBS = int(os.environ.get("FXHLO_OPINFO_JOBS", "2"))


def _sample(name, mode="fwd-f32", index=0):
    op = opinfo._ops_by_name()[name]
    return opinfo.Sample(op, opinfo.samples_of(op, mode, index + 1)[index])


def test_compare_rules():
    """f32 tolerances are assert_close's; beyond them fxhlo may be no worse than eager against
    float64; integer outputs are exact; index outputs of sorts may differ in tie order."""
    e = torch.tensor([1.0, 2.0, 3.0])
    assert opinfo._close(e + 1e-6, e) is None
    assert opinfo._close(e + 1e-3, e) is not None
    # eager is off by 1e-3 from the exact answer; fxhlo by less: not a mismatch
    ref = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    eager = e + 1e-3
    assert opinfo._close(e + 5e-4, eager, ref) is None
    assert opinfo._close(e + 3e-3, eager, ref) is not None
    # NaN where eager and float64 give a number is wrong
    assert opinfo._close(torch.tensor([float("nan"), 2.0, 3.0]), e, ref) is not None
    assert opinfo._close(torch.tensor([float("nan")]), torch.tensor([float("nan")])) is None
    assert opinfo._close(e.to(torch.float64), e) is not None  # dtype
    assert opinfo._close(torch.tensor([1, 2]), torch.tensor([1, 3])) is not None
    # bf16: its own tolerance (rtol 1.6e-2)
    b = torch.tensor([1.0, 100.0], dtype=torch.bfloat16)
    assert opinfo._close(b * 1.0078125, b) is None

    s = _sample("sort")
    x = s.tensors[0]
    vals, idx = torch.sort(x, dim=-1)
    want = {"out": [vals, idx]}
    assert opinfo.compare(s, {"out": [vals, idx]}, want, lambda: None) is None
    # a tie: two equal values swapped in the index output are accepted, other swaps are not
    y = torch.tensor([[3.0, 1.0, 1.0, 2.0]])
    s.tensors[0] = y
    v, i = torch.sort(y, dim=-1)
    swapped = i.clone()
    swapped[0, 0], swapped[0, 1] = i[0, 1], i[0, 0]
    assert opinfo.compare(s, {"out": [v, swapped]}, {"out": [v, i]}, lambda: None) is None
    wrong = i.clone()
    wrong[0, 1], wrong[0, 2] = i[0, 2], i[0, 1]
    assert opinfo.compare(s, {"out": [v, wrong]}, {"out": [v, i]}, lambda: None) is not None


def test_sign_rule_for_eigenvectors():
    """Eigenvectors may differ from eager's in the sign of each vector, nothing else; a flip
    compares the gradients with eager's for the flipped cotangent."""
    s = _sample("linalg.eigh")
    a = s.tensors[0]
    w, v = torch.linalg.eigh(a + a.mT)
    want = {"out": [w, v]}
    flip = torch.tensor([1.0, -1.0, 1.0, 1.0, -1.0])
    assert opinfo.compare(s, {"out": [w, v * flip]}, want, lambda: None) is None
    # a wrong vector (two eigenvectors swapped) is a mismatch, and so are wrong eigenvalues
    swapped = v[:, [1, 0, 2, 3, 4]]
    assert opinfo.compare(s, {"out": [w, swapped]}, want, lambda: None) is not None
    assert opinfo.compare(s, {"out": [w + 1e-3, v * flip]}, want, lambda: None) is not None
    # gradients: with a flip, eager's gradient for flipped cotangents is the one to match
    g, g_flipped = torch.ones(5, 5), torch.full((5, 5), 2.0)
    asked = []

    def regrad(signs):
        asked.append(signs[1][0].tolist())
        return [g_flipped]
    got = {"out": [w, v * flip], "grad": [g_flipped]}
    assert opinfo.compare(s, got, {**want, "grad": [g]}, lambda: None, regrad) is None
    assert asked == [flip.tolist()]
    assert opinfo.compare(s, got, {**want, "grad": [g]}, lambda: None) is not None
    # no flip: the gradients are compared as they are
    assert opinfo.compare(s, {"out": [w, v], "grad": [g]}, {**want, "grad": [g]},
                          lambda: None) is None


def test_classify_errors():
    from fxhlo import _native
    msg = ("fxhlo (strict): g0_inference: op(s) not supported by fxhlo yet, run in eager: "
           "aten.lgamma.default (1 node), aten.mul.Tensor (torch.complex64) (2 nodes); the "
           "other parts of the graph are compiled")
    r = opinfo.classify_error(_native.FxhloError(msg))
    assert r["status"] == "unsupported"
    assert r["unsupported"] == ["aten.lgamma.default", "aten.mul.Tensor (torch.complex64)"]
    try:
        try:
            raise _native.FxhloError("node 3 'x' (aten.foo): bad")
        except Exception as inner:
            raise RuntimeError("backend failed") from inner
    except Exception as e:
        assert opinfo.classify_error(e)["status"] == "compile-error"
    assert opinfo.classify_error(KeyError("x"))["status"] == "crash"


def _fxhlo_file():
    import fxhlo
    return fxhlo.__file__


def test_spawned_workers_import_the_parents_fxhlo():
    """The harness's workers are spawned: they start from this process's sys.path, and must
    import the same fxhlo package (a test that puts the checkout's python/ first would make
    them import one without its native module)."""
    import multiprocessing as mp

    import fxhlo
    with mp.get_context("spawn").Pool(1) as pool:
        assert pool.apply(_fxhlo_file) == fxhlo.__file__


def test_harness_with_aot_eager_and_a_dying_worker():
    """With backend aot_eager every counted sample passes (the harness judges nothing
    wrongly); a worker that dies in the backend is a crash record, and the run goes on."""
    tasks = opinfo.tasks_for(["sin", "sort", "nn.functional.conv2d", "bernoulli"],
                             ["fwd-f32", "fwdbwd-f32", "fwd-bf16"], 1)
    recs = opinfo.run(tasks, 1, jobs=JOBS, backend="aot_eager")
    by = {(r["op"], r["mode"]): r for r in recs}
    assert len(recs) == len(tasks) == 12
    for (op, mode), r in by.items():
        if op == "bernoulli":
            assert r["status"] == "not-counted"  # random values: aot_eager differs too
        else:
            assert r["status"] == "pass", r
    os.environ["FXHLO_OPINFO_CRASH"] = "sin"
    try:
        recs = opinfo.run(opinfo.tasks_for(["sin", "cos"], ["fwd-f32"], 1), 1, jobs=1,
                          backend="aot_eager")
    finally:
        del os.environ["FXHLO_OPINFO_CRASH"]
    assert [(r["op"], r["status"]) for r in recs] == [("sin", "crash"), ("cos", "pass")]
    assert "worker died" in recs[0]["detail"]


def test_opinfo_ci_subset():
    pytest.importorskip("fxhlo._native")
    t0 = time.time()
    tasks = opinfo.ci_tasks()
    recs = opinfo.run(tasks, 1, jobs=JOBS)
    lines = []
    for m in opinfo.MODES:
        s = opinfo.summary(recs, m)
        lines.append(f"{m}: {s['counted']} counted, pass {s['pass']} ({s['pass_pct']:.1f}%), "
                     f"mismatch {s['mismatch']}, crash {s['crash']}, compile error "
                     f"{s['compile_error']}, unsupported {s['unsupported']}")
    print("\n".join(lines) + f"\n{len(tasks)} tasks in {time.time() - t0:.0f} s")
    unexpected, passes = opinfo.check_xfail(recs, XFAIL)
    detail = {k: [r.get("detail") for r in recs if (r["op"], r["mode"]) == k
                  and r["status"] not in ("pass", "not-counted")] for k in unexpected}
    assert not unexpected, f"failures not in fxhlo/opinfo_xfail.py: {detail}"
    assert not passes, f"listed in fxhlo/opinfo_xfail.py but pass now (remove them): {passes}"
