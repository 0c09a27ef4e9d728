"""PyTorch's OpInfo database through the ``torch.compile`` backend (issue 35).

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db``, the first
``K`` samples (default 3) on the CPU are each wrapped in a small function (the sample's tensor
leaves are its inputs; everything else is a constant) and run in three modes:

* ``fwd-f32``: forward, float32 samples;
* ``fwdbwd-f32``: forward and backward, float32 samples made with ``requires_grad=True``: the
  gradients of the float inputs that require grad, for a fixed random cotangent of every
  differentiable output;
* ``fwd-bf16``: forward, bfloat16 samples.

Each sample is compiled with ``torch.compile(fn, backend=fxhlo_backend, options={"strict":
True}, dynamic=False, fullgraph=True)`` after ``torch._dynamo.reset()``, and compared with
eager.  A sample fxhlo does not pass is also run under ``backend="aot_eager"`` (every sample,
first, with ``--always-aot-eager``): a sample that eager or aot_eager cannot run (Dynamo cannot
capture it whole, data-dependent shapes, random ops whose values differ, ...) is *not counted*
(a sample fxhlo passes went through the same Dynamo capture and aot_autograd trace).  A
counted sample is one of

* ``pass``: every output (and gradient) matches;
* ``mismatch``: a wrong answer (the largest error is recorded);
* ``unsupported``: strict mode refused an op fxhlo lacks (``op(s) not supported by fxhlo yet``);
  counted as not passing but reported apart, with the ops;
* ``compile-error``: fxhlo raised its own error (``fxhlo.FxhloError``) for another reason;
* ``crash``: any other exception out of the backend (a bug: unless strict it would have been a
  fallback), or the worker process died or ran past the time limit.

Samples run in a pool of worker processes (``--jobs``); a worker that dies or times out is
replaced and its sample recorded as a crash.

Comparison (stated, never widened to make something pass): floating outputs with
``torch.testing.assert_close``'s defaults for the dtype (float32: rtol 1.3e-6, atol 1e-5;
bfloat16: rtol 1.6e-2, atol 1e-5), NaNs equal, dtypes and shapes exact.  Where fxhlo and eager
differ by more than that, the sample is rerun in eager in float64 (floating inputs cast) and an
element is accepted when fxhlo's error against float64 is at most eager's error plus the same
tolerance (``|fx - ref| <= |eager - ref| + atol + rtol * |ref|``): an answer closer to the
exact one is not a mismatch.  Integer and bool outputs are exact, except the index outputs of
sorts, top-k and arg/cumulative max/min, which may differ only in tie order (the input values
they point at must be equal).  Eigenvectors and singular vectors (``linalg.eigh``,
``linalg.svd``, ``svd``: :data:`SIGN_VECTORS`) are unique only up to the sign of each vector
(of each pair u_i, v_i): fxhlo's are flipped to eager's signs before they are compared, and
where a vector flips, the gradients are compared with eager's for the cotangent of that
vector flipped too (what eager's gradient would be had it returned fxhlo's vectors).  The
``empty*`` ops' values are uninitialized memory: only their
shapes and dtypes are compared.

    python -m fxhlo.opinfo                         # all ops, all modes, K=3, 2 jobs
    python -m fxhlo.opinfo --ops sin,cumsum --modes fwd-f32 -v
    python -m fxhlo.opinfo --json /tmp/opinfo.json --table docs/opinfo.md

Needs ``expecttest`` (op_db imports it).
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import math
import os
import re
import sys
import time
import traceback
import warnings
import zlib
from typing import Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

MODES = ("fwd-f32", "fwdbwd-f32", "fwd-bf16")
COUNTED = ("pass", "mismatch", "unsupported", "compile-error", "crash")
DEFAULT_TIMEOUT = 180.0

# index outputs that may differ in tie order: OpInfo name -> how to find the dimension
TIE_OPS = {"sort", "argsort", "msort", "topk", "kthvalue", "median", "nanmedian", "mode",
           "max.reduction_with_dim", "min.reduction_with_dim", "argmax", "argmin", "cummax",
           "cummin"}


# outputs made of vectors that are unique only up to sign (eigenvectors, singular vectors):
# OpInfo name -> [(output index, dimension that indexes the vectors)]; the first k vectors of
# an entry's outputs (k the fewest) flip together (u_i and v_i of an SVD)
SIGN_VECTORS = {"linalg.eigh": [(1, -1)], "linalg.svd": [(0, -1), (2, -2)],
                "svd": [(0, -1), (2, -1)]}

# ops whose values are uninitialized memory: only their shapes and dtypes are compared
UNINITIALIZED = {"empty", "empty_like", "new_empty", "new_empty_strided", "empty_strided",
                 "empty_permuted"}


def opinfo_name(op) -> str:
    """An OpInfo's name as the tables list it: ``name`` or ``name.variant``."""
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def _err(e: BaseException) -> str:
    """An exception as one short line (the backend's own rule, ``fxhlo.backend._why``)."""
    from .backend import _why  # imports torch: not at module level
    return _why(e)


# ----------------------------------------------------------------------------------------
# one sample (runs in a worker)


def mode_applies(op, mode: str) -> bool:
    """Whether the OpInfo has samples in ``mode`` on the CPU."""
    import torch
    if mode == "fwd-f32":
        return torch.float32 in op.supported_dtypes("cpu")
    if mode == "fwd-bf16":
        return torch.bfloat16 in op.supported_dtypes("cpu")
    if mode == "fwdbwd-f32":
        return (op.supports_autograd and torch.float32 in op.supported_dtypes("cpu")
                and torch.float32 in op.supported_backward_dtypes("cpu"))
    raise ValueError(f"unknown mode {mode!r}; modes: {', '.join(MODES)}")


def samples_of(op, mode: str, k: int) -> list:
    """The first ``k`` samples of ``op`` in ``mode`` (seeded by the OpInfo's name and the
    mode, so every process makes the same ones)."""
    import torch
    torch.manual_seed(zlib.crc32(f"{opinfo_name(op)}/{mode}".encode()))
    dtype = torch.bfloat16 if mode == "fwd-bf16" else torch.float32
    gen = op.sample_inputs("cpu", dtype, requires_grad=(mode == "fwdbwd-f32"))
    return list(itertools.islice(gen, k))


class Sample:
    """A sample as a function of its tensor leaves."""

    def __init__(self, op, sample):
        import torch
        from torch.utils import _pytree as pytree
        self.op = op
        self.sample = sample
        leaves, self.spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
        self.leaves = leaves
        self.where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
        self.tensors = [leaves[i] for i in self.where]

    def fn(self) -> Callable:
        from torch.utils import _pytree as pytree
        leaves, where, spec, op = list(self.leaves), self.where, self.spec, self.op.op

        def sample_fn(*ts):
            vals = list(leaves)
            for i, t in zip(where, ts):
                vals[i] = t
            inp, args, kwargs = pytree.tree_unflatten(vals, spec)
            return op(inp, *args, **kwargs)
        return sample_fn

    def inputs(self, dtype=None) -> list:
        """Fresh copies of the tensor leaves (floating ones cast to ``dtype`` if given), with
        the sample's ``requires_grad``."""
        out = []
        for t in self.tensors:
            c = t.detach().clone()
            if dtype is not None and c.is_floating_point():
                c = c.to(dtype)
            if t.requires_grad and c.is_floating_point():
                c.requires_grad_(True)
            out.append(c)
        return out


def _flat(x) -> list:
    from torch.utils import _pytree as pytree
    return pytree.tree_flatten(x)[0]


def _cotangents(outs: Sequence, seed: int) -> list:
    import torch
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outs]


def run_once(s: Sample, fn: Callable, mode: str, dtype=None,
             cot_signs: Optional[Dict[int, Any]] = None) -> Dict[str, list]:
    """Runs ``fn`` on fresh inputs; returns the flat outputs and, in ``fwdbwd``, the gradients
    of the inputs that require grad for fixed cotangents (zeros where unused).  ``cot_signs``
    (output index -> per-vector signs, see :func:`_vector_signs`) flips the cotangents of
    those outputs' vectors."""
    import torch
    ins = s.inputs(dtype)
    out = _flat(fn(*ins))
    res = {"out": [o.detach() if isinstance(o, torch.Tensor) else o for o in out]}
    if mode == "fwdbwd-f32":
        idx = [i for i, o in enumerate(out) if isinstance(o, torch.Tensor) and o.requires_grad
               and o.grad_fn is not None and (o.is_floating_point() or o.is_complex())]
        diff = [out[i] for i in idx]
        wrt = [t for t in ins if t.requires_grad]
        if diff and wrt:
            cots = _cotangents(diff, 1234)
            if cot_signs:
                cots = [_flip(c, *cot_signs[i]) if i in cot_signs else c
                        for i, c in zip(idx, cots)]
            grads = torch.autograd.grad(diff, wrt, cots, allow_unused=True)
            res["grad"] = [torch.zeros_like(w) if g is None else g.detach()
                           for w, g in zip(wrt, grads)]
        else:
            res["grad"] = []
    return res


def _tols(dtype) -> Tuple[float, float]:
    import torch
    from torch.testing._comparison import default_tolerances
    r, a = default_tolerances(torch.empty((), dtype=dtype))
    return r, a


def _close(a, e, ref=None) -> Optional[Tuple[str, float]]:
    """None when tensor ``a`` (fxhlo) matches ``e`` (eager) by the rule of the module doc,
    else (why, largest error)."""
    import torch
    if a.shape != e.shape:
        return f"shape {list(a.shape)} != eager's {list(e.shape)}", math.inf
    if a.dtype != e.dtype:
        return f"dtype {a.dtype} != eager's {e.dtype}", math.inf
    if not (a.is_floating_point() or a.is_complex()):
        if torch.equal(a, e):
            return None
        n = int((a != e).sum())
        return f"{n} of {a.numel()} elements differ ({a.dtype})", float(n)
    rtol, atol = _tols(a.dtype)
    a64 = a.detach().to(torch.complex128 if a.is_complex() else torch.float64)
    e64 = e.detach().to(a64.dtype)
    both_nan = torch.isnan(a64) & torch.isnan(e64)
    same = (a64 == e64) | both_nan  # equal infinities too
    diff = (a64 - e64).abs()
    bad = ~same & ~(diff <= atol + rtol * e64.abs())
    if not bool(bad.any()):
        return None
    err = float(torch.where(bad, diff, torch.zeros_like(diff)).nan_to_num(math.inf).max())
    if ref is not None and ref.shape == a.shape:
        r64 = ref.detach().to(a64.dtype)
        fe = (a64 - r64).abs()
        ee = (e64 - r64).abs()
        nan_a, nan_e, nan_r = torch.isnan(a64), torch.isnan(e64), torch.isnan(r64)
        ok = same | (fe <= ee.nan_to_num(math.inf) + atol + rtol * r64.abs())
        ok = ok | (nan_a & nan_r) | (nan_e & ~nan_a & ~nan_r & (fe <= atol + rtol * r64.abs()))
        ok = ok & ~(nan_a & ~nan_e & ~nan_r)
        bad2 = ~ok
        if not bool(bad2.any()):
            return None
        err = float(torch.where(bad2, diff, torch.zeros_like(diff)).nan_to_num(math.inf).max())
        n = int(bad2.sum())
        return (f"{n} of {a.numel()} elements differ beyond rtol {rtol:g} atol {atol:g}, also "
                f"against float64 (largest abs error {err:.3g})"), err
    n = int(bad.sum())
    return (f"{n} of {a.numel()} elements differ beyond rtol {rtol:g} atol {atol:g} (largest "
            f"abs error {err:.3g}; no float64 reference)"), err


def _tie_dim(s: Sample) -> Optional[int]:
    name = opinfo_name(s.op)
    args, kw = s.sample.args, s.sample.kwargs
    if name in ("topk", "kthvalue"):
        d = args[1] if len(args) > 1 else kw.get("dim", -1)
    elif name == "msort":
        d = 0
    elif name in ("sort", "argsort"):
        d = args[0] if args and isinstance(args[0], int) else kw.get("dim", -1)
    else:
        d = args[0] if args and isinstance(args[0], int) else kw.get("dim", None)
    return d


def _ties_only(s: Sample, a, e) -> bool:
    """Whether index outputs ``a`` and ``e`` point at equal input values (tie order only)."""
    import torch
    x = s.tensors[0].detach() if s.tensors else None
    if x is None or a.shape != e.shape or a.dtype != torch.int64:
        return False
    d = _tie_dim(s)
    try:
        if d is None:
            flat = x.reshape(-1)
            va, ve = flat[a.reshape(-1)], flat[e.reshape(-1)]
        else:
            if x.dim() == 0:
                return bool((a == e).all())
            d = d % x.dim()
            ia, ie = a, e
            if ia.dim() < x.dim():
                ia, ie = ia.unsqueeze(d), ie.unsqueeze(d)
            shape = list(x.shape)
            shape[d] = ia.shape[d]
            if list(ia.shape) != shape:
                return False
            va, ve = x.gather(d, ia), x.gather(d, ie)
    except Exception:  # noqa: BLE001 - not an index output of the input
        return False
    return bool(((va == ve) | (torch.isnan(va) & torch.isnan(ve))).all())


def _flip(x, signs, dim):
    """``x`` with the vectors indexed by dimension ``dim`` multiplied by ``signs``."""
    return x * signs.to(x.dtype).unsqueeze(-1 if dim == -2 else -2)


def _vector_signs(name: str, got: list, want: list) -> Optional[Dict[int, Any]]:
    """For an OpInfo of :data:`SIGN_VECTORS`: output index -> (signs, dim), the +-1 per vector
    that brings ``got``'s vectors closest to ``want``'s (the first k of an entry's outputs
    flip together); None for other ops or outputs of other shapes."""
    import torch
    spec = SIGN_VECTORS.get(name)
    if spec is None:
        return None
    dots = {}
    for i, dim in spec:
        if i >= len(got) or i >= len(want) or not isinstance(got[i], torch.Tensor) \
                or not isinstance(want[i], torch.Tensor) or got[i].shape != want[i].shape \
                or got[i].dim() < 2:
            return None
        # components run along the other matrix dimension
        dots[i] = (got[i].double() * want[i].double()).sum(-2 if dim == -1 else -1)
    k = min(d.shape[-1] for d in dots.values())
    common = sum(d[..., :k] for d in dots.values())

    def sign(x):
        return torch.where(x < 0, -1.0, 1.0).to(torch.float64)
    return {i: (torch.cat([sign(common), sign(d[..., k:])], -1), dim)
            for (i, dim), d in zip(spec, dots.values())}


def compare(s: Sample, got: Dict[str, list], want: Dict[str, list],
            ref: Callable[[], Optional[Dict[str, list]]],
            regrad: Optional[Callable[[Dict[int, Any]], list]] = None
            ) -> Optional[Tuple[str, float]]:
    """None when ``got`` matches ``want``; else (why, largest error).  ``ref()`` gives the
    float64 run (or None), made only when needed.  For the OpInfos of :data:`SIGN_VECTORS`,
    ``got``'s vectors are first flipped to eager's signs; where some flip, the gradients are
    compared with eager's for cotangents flipped the same way (``regrad(signs)``, no float64
    reference: ``got``'s cotangent of a flipped vector is eager's flipped)."""
    import torch
    ref_vals: Dict[str, Any] = {}
    name = opinfo_name(s.op)
    signs = _vector_signs(name, got.get("out", []), want.get("out", []))
    if signs is not None:
        got = dict(got)
        got["out"] = [_flip(o, *signs[i]) if i in signs else o
                      for i, o in enumerate(got["out"])]
        if got.get("grad") and any(bool((v < 0).any()) for v, _ in signs.values()):
            if regrad is None:
                return "grad: vectors flipped and no gradient for flipped cotangents", math.inf
            want = dict(want)
            want["grad"] = regrad(signs)
            ref_vals["grad"] = None

    def reference(kind, i):
        if "v" not in ref_vals:
            try:
                ref_vals["v"] = ref()
            except Exception:  # noqa: BLE001 - no float64 reference for this op
                ref_vals["v"] = None
            v = ref_vals["v"]
            if v is not None and signs is not None:  # float64's vectors to eager's signs
                rs = _vector_signs(name, v.get("out", []), want.get("out", []))
                if rs is not None:
                    v = dict(v)
                    v["out"] = [_flip(o, *rs[j]) if j in rs else o
                                for j, o in enumerate(v["out"])]
                    ref_vals["v"] = v
        v = ref_vals["v"]
        if v is None or len(v.get(kind, [])) <= i or (kind == "grad" and "grad" in ref_vals):
            return None
        r = v[kind][i]
        return r if isinstance(r, torch.Tensor) else None

    for kind in ("out", "grad"):
        g, w = got.get(kind, []), want.get(kind, [])
        if len(g) != len(w):
            return f"{kind}: {len(g)} values, eager gives {len(w)}", math.inf
        for i, (a, e) in enumerate(zip(g, w)):
            if isinstance(e, torch.Tensor) != isinstance(a, torch.Tensor):
                return f"{kind} {i}: {type(a).__name__}, eager gives {type(e).__name__}", math.inf
            if not isinstance(e, torch.Tensor):
                if a != e and not (isinstance(a, float) and math.isnan(a) and math.isnan(e)):
                    return f"{kind} {i}: {a!r}, eager gives {e!r}", math.inf
                continue
            if opinfo_name(s.op) in UNINITIALIZED:
                if a.shape != e.shape or a.dtype != e.dtype:
                    return (f"{kind} {i}: {a.dtype}{list(a.shape)}, eager gives "
                            f"{e.dtype}{list(e.shape)}"), math.inf
                continue
            r = _close(a, e)
            if r is None:
                continue
            if not (a.is_floating_point() or a.is_complex()):
                if kind == "out" and opinfo_name(s.op) in TIE_OPS and _ties_only(s, a, e):
                    continue
                return f"{kind} {i}: {r[0]}", r[1]
            rr = _close(a, e, reference(kind, i))
            if rr is not None:
                return f"{kind} {i}: {rr[0]}", rr[1]
    return None


def _chain(e: BaseException) -> List[BaseException]:
    out, seen = [], set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        out.append(e)
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__
    return out


_UNSUPPORTED = re.compile(r"op\(s\) not supported by fxhlo yet, run in eager: (.*?); the other "
                          r"parts")
_OP_COUNT = re.compile(r"\s*(.+?) \(\d+ nodes?\)(?:,|$)")


def classify_error(e: BaseException) -> Dict[str, Any]:
    """A failure of the fxhlo-compiled sample as a record: unsupported, compile-error or
    crash (see the module doc)."""
    try:
        from fxhlo._native import FxhloError
    except ImportError:  # validating the harness with another backend
        FxhloError = ()
    chain = _chain(e)
    fx = next((x for x in chain if FxhloError and isinstance(x, FxhloError)), None)
    if fx is None:
        inner = chain[-1] if len(chain) > 1 else e
        tb = traceback.extract_tb(inner.__traceback__)
        where = next((f"{os.path.basename(f.filename)}:{f.lineno}" for f in reversed(tb)
                      if "fxhlo" in f.filename), None)
        return {"status": "crash", "detail": _err(inner) + (f" (at {where})" if where else "")}
    msg = str(fx)
    m = _UNSUPPORTED.search(msg)
    if m:
        ops = [x.group(1).strip() for x in _OP_COUNT.finditer(m.group(1))
               if x.group(1).strip() != "getitem"]
        return {"status": "unsupported", "unsupported": ops or [m.group(1)],
                "detail": "unsupported: " + ", ".join(ops)}
    return {"status": "compile-error", "detail": _err(fx)}


def _compiled(fn: Callable, backend) -> Callable:
    import torch
    if backend == "fxhlo":
        from fxhlo.backend import fxhlo_backend
        return torch.compile(fn, backend=fxhlo_backend, dynamic=False, fullgraph=True,
                             options={"strict": True, "cache": False, "threads": 1})
    return torch.compile(fn, backend=backend, dynamic=False, fullgraph=True)


def run_sample(op, mode: str, index: int, k: int, progress: Callable[[str], None] = None,
               backend: str = "fxhlo", always_aot_eager: bool = False
               ) -> Optional[Dict[str, Any]]:
    """The record of sample ``index`` of ``op`` in ``mode``; None if it has fewer samples.
    ``backend`` other than fxhlo (aot_eager) validates the harness: everything counted
    passes.  aot_eager runs first when ``always_aot_eager``, else only when fxhlo does not
    pass (a pass went through the same Dynamo capture and aot_autograd trace)."""
    import torch
    progress = progress or (lambda phase: None)
    t0 = time.time()
    rec: Dict[str, Any] = {"op": opinfo_name(op), "mode": mode, "sample": index}
    try:
        ss = samples_of(op, mode, k)
    except Exception as e:  # noqa: BLE001 - a broken sample generator is not counted
        rec.update(status="not-counted", detail="samples: " + _err(e))
        return rec
    if index >= len(ss):
        return None
    s = Sample(op, ss[index])
    rec["shapes"] = [list(t.shape) for t in s.tensors][:6]
    fn = s.fn()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            want = run_once(s, fn, mode)
        except Exception as e:  # noqa: BLE001
            rec.update(status="not-counted", detail="eager: " + _err(e))
            return rec

        def ref64():
            return run_once(s, fn, mode, torch.float64)

        def aot_eager_fails() -> Optional[str]:
            progress("aot_eager")
            try:
                torch._dynamo.reset()
                got = run_once(s, _compiled(fn, "aot_eager"), mode)
                bad = compare(s, got, want, ref64)
            except Exception as e:  # noqa: BLE001
                bad = (_err(e), math.inf)
            finally:
                torch._dynamo.reset()
            return None if bad is None else "aot_eager: " + bad[0]

        if always_aot_eager:
            why = aot_eager_fails()
            if why is not None:
                rec.update(status="not-counted", detail=why)
                return rec
        progress("fxhlo")
        if os.environ.get("FXHLO_OPINFO_CRASH") == rec["op"]:
            os._exit(3)  # tests: a worker dying in the backend is recorded as a crash
        try:
            torch._dynamo.reset()
            got = run_once(s, _compiled(fn, backend), mode)
            bad = compare(s, got, want, ref64,
                          lambda signs: run_once(s, fn, mode, cot_signs=signs)["grad"])
            if bad is None:
                rec["status"] = "pass"
            else:
                rec.update(status="mismatch", detail=bad[0], max_err=bad[1])
        except Exception as e:  # noqa: BLE001
            rec.update(classify_error(e))
        finally:
            torch._dynamo.reset()
        if rec["status"] != "pass" and not always_aot_eager:
            why = aot_eager_fails()
            if why is not None:
                rec.update(status="not-counted", detail=why, fxhlo=rec["status"])
                rec.pop("unsupported", None)
                rec.pop("max_err", None)
    rec["seconds"] = round(time.time() - t0, 3)
    return rec


# ----------------------------------------------------------------------------------------
# the pool


def _ops_by_name() -> Dict[str, Any]:
    from torch.testing._internal.common_methods_invocations import op_db
    return {opinfo_name(op): op for op in op_db}


def _worker(conn, k: int, backend: str, always: bool) -> None:
    os.environ.setdefault("FXHLO_NUM_THREADS", "1")
    try:
        os.nice(int(os.environ.get("FXHLO_OPINFO_NICE", "0")))
    except OSError:
        pass
    import torch
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    ops = _ops_by_name()
    if backend == "fxhlo":
        import fxhlo.backend  # noqa: F401 - imported once, before the first sample
    conn.send(("ready", None))
    while True:
        task = conn.recv()
        if task is None:
            return
        name, mode, index = task
        try:
            rec = run_sample(ops[name], mode, index, k,
                             lambda phase: conn.send(("phase", phase)), backend, always)
        except Exception as e:  # noqa: BLE001 - the harness itself: recorded, not fatal
            rec = {"op": name, "mode": mode, "sample": index, "status": "crash",
                   "detail": "harness: " + _err(e)}
        conn.send(("done", rec))


class _Slot:
    def __init__(self, ctx, k, backend, always):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, k, backend, always), daemon=True)
        self.proc.start()
        child.close()
        self.ready = False
        self.task = None
        self.started = 0.0
        self.phase = None

    def stop(self, kill=False):
        try:
            if kill:
                self.proc.kill()
            else:
                self.conn.send(None)
        except Exception:  # noqa: BLE001
            pass
        self.proc.join(5)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join()


def tasks_for(ops: Iterable[str], modes: Sequence[str], k: int,
              ks: Optional[Dict[str, int]] = None) -> List[Tuple[str, str, int]]:
    """The (OpInfo, mode, sample index) tasks; ``ks`` overrides ``k`` per mode."""
    by = _ops_by_name()
    out = []
    for mode in modes:  # mode by mode: a run stopped early has whole modes
        for name in ops:
            op = by[name]
            try:
                if not mode_applies(op, mode):
                    continue
            except Exception:  # noqa: BLE001
                continue
            for i in range((ks or {}).get(mode, k)):
                out.append((name, mode, i))
    return out


def run(tasks: List[Tuple[str, str, int]], k: int, jobs: int = 2,
        timeout: float = DEFAULT_TIMEOUT, verbose: bool = False,
        backend: str = "fxhlo", always_aot_eager: bool = False,
        partial: Optional[str] = None) -> List[Dict[str, Any]]:
    """Runs ``tasks`` in ``jobs`` worker processes; returns one record per existing sample
    (also appended to the file ``partial`` as JSON lines as they come, if given)."""
    import multiprocessing as mp
    from multiprocessing.connection import wait
    ctx = mp.get_context("spawn")
    pending = collections.deque(tasks)
    slots = [_Slot(ctx, k, backend, always_aot_eager) for _ in range(max(1, min(jobs, len(tasks))))]
    records: List[Dict[str, Any]] = []
    done = 0

    def finish(slot, rec):
        nonlocal done
        done += 1
        slot.task = None
        if rec is not None:
            records.append(rec)
            if partial:
                with open(partial, "a") as f:
                    f.write(json.dumps(rec) + "\n")
            if verbose:
                print(f"[{done}/{len(tasks)}] {rec['op']} {rec['mode']} #{rec['sample']}: "
                      f"{rec['status']} {rec.get('detail', '')}"[:300], file=sys.stderr,
                      flush=True)

    try:
        while pending or any(s.task for s in slots):
            for s in slots:
                if s.ready and s.task is None and pending:
                    s.task = pending.popleft()
                    s.started = time.time()
                    s.phase = None
                    s.conn.send(s.task)
            ready = wait([s.conn for s in slots] + [s.proc.sentinel for s in slots],
                         timeout=1.0)
            for i, s in enumerate(slots):
                died = False
                if s.conn in ready:
                    try:
                        while s.conn.poll():
                            what, val = s.conn.recv()
                            if what == "ready":
                                s.ready = True
                            elif what == "phase":
                                s.phase = val
                            elif what == "done":
                                finish(s, val)
                    except (EOFError, OSError):
                        died = True
                if not died and not s.proc.is_alive():
                    died = True
                timed_out = s.task is not None and time.time() - s.started > timeout
                if died or timed_out:
                    if s.task is not None:
                        name, mode, index = s.task
                        why = (f"timeout after {timeout:.0f} s" if timed_out and not died
                               else f"worker died (exit code {s.proc.exitcode})")
                        counted = s.phase == "fxhlo"
                        finish(s, {"op": name, "mode": mode, "sample": index,
                                   "status": "crash" if counted else "not-counted",
                                   "detail": why + ("" if counted else
                                                    f" before fxhlo ran ({s.phase or 'eager'})")})
                    elif not s.ready:
                        raise RuntimeError(f"an OpInfo worker failed to start "
                                           f"(exit code {s.proc.exitcode})")
                    s.stop(kill=True)
                    slots[i] = _Slot(ctx, k, backend, always_aot_eager)
    finally:
        for s in slots:
            s.stop(kill=s.task is not None)
    order = {t: i for i, t in enumerate(tasks)}
    records.sort(key=lambda r: order.get((r["op"], r["mode"], r["sample"]), 0))
    return records


# ----------------------------------------------------------------------------------------
# the expected failures and the CI subset

# The subset python/tests/test_opinfo.py runs (the whole database at K=3 over three modes
# takes too long for CI on 2 cores): every OpInfo's first sample forward in f32, and the
# first sample of one OpInfo in CI_SHARDS (chosen by a hash of its name, so a fixed set)
# forward+backward in f32 and forward in bf16.
CI_SHARDS = 3


def ci_tasks() -> List[Tuple[str, str, int]]:
    """The deterministic subset of tasks CI runs (see CI_SHARDS)."""
    names = list(_ops_by_name())
    sharded = [n for n in names if zlib.crc32(n.encode()) % CI_SHARDS == 0]
    return (tasks_for(names, ["fwd-f32"], 1)
            + tasks_for(sharded, ["fwdbwd-f32", "fwd-bf16"], 1))


def check_xfail(records: List[Dict[str, Any]], xfail: Optional[Dict] = None
                ) -> Tuple[Dict[Tuple[str, str], List[str]], List[Tuple[str, str]]]:
    """(unexpected failures: (OpInfo, mode) -> statuses, unexpected passes: listed pairs of
    which every counted sample in ``records`` passes)."""
    from . import opinfo_xfail
    if xfail is None:
        xfail = opinfo_xfail.XFAIL
    where = getattr(opinfo_xfail, "XFAIL_SAMPLES", {})
    fails = failing(records)
    ran = collections.defaultdict(set)
    for r in records:
        if r["status"] in COUNTED:
            ran[(r["op"], r["mode"])].add(r["sample"])
    unexpected = {k: v for k, v in fails.items() if k not in xfail}
    # a listed pair passes unexpectedly when the samples it failed on ran and passed (a run
    # of fewer samples, as CI's, may not include them)
    passes = sorted(k for k in xfail if k in ran and k not in fails
                    and (k not in where or set(where[k]) & ran[k]))
    return unexpected, passes


# ----------------------------------------------------------------------------------------
# reports


def summary(records: List[Dict[str, Any]], mode: str) -> Dict[str, Any]:
    rs = [r for r in records if r["mode"] == mode]
    counted = [r for r in rs if r["status"] in COUNTED]
    by = collections.Counter(r["status"] for r in rs)
    unsup = collections.Counter(o for r in counted if r["status"] == "unsupported"
                                for o in r.get("unsupported", []))
    return {
        "samples": len(rs), "counted": len(counted), "not_counted": by["not-counted"],
        "pass": by["pass"], "pass_pct": 100.0 * by["pass"] / max(len(counted), 1),
        "mismatch": by["mismatch"], "crash": by["crash"], "compile_error": by["compile-error"],
        "unsupported": by["unsupported"], "unsupported_ops": dict(unsup.most_common()),
        "opinfos": len({r["op"] for r in rs}),
        "sample_seconds": sum(r.get("seconds", 0.0) for r in rs),
    }


def failing(records: List[Dict[str, Any]]) -> Dict[Tuple[str, str], List[str]]:
    """(OpInfo, mode) -> the statuses of its counted samples that do not pass."""
    out: Dict[Tuple[str, str], List[str]] = {}
    for r in records:
        if r["status"] in COUNTED and r["status"] != "pass":
            out.setdefault((r["op"], r["mode"]), []).append(r["status"])
    return out


def xfail_source(records: List[Dict[str, Any]]) -> str:
    """python/fxhlo/opinfo_xfail.py listing every (OpInfo, mode) of ``records`` with a
    counted sample that does not pass, the reason its first such sample gives."""
    head = open(os.path.join(os.path.dirname(__file__), "opinfo_xfail.py")).read()
    head = head[:head.index("XFAIL: Dict")]
    reasons: Dict[Tuple[str, str], str] = {}
    samples: Dict[Tuple[str, str], List[int]] = collections.defaultdict(list)
    for r in records:
        if r["status"] in COUNTED and r["status"] != "pass":
            key = (r["op"], r["mode"])
            samples[key].append(r["sample"])
            if key not in reasons:
                if r["status"] == "unsupported":
                    why = "unsupported: " + ", ".join(r.get("unsupported", []))
                else:
                    why = f"{r['status']}: {r.get('detail', '')}"
                reasons[key] = why if len(why) <= 200 else why[:197] + "..."
    order = {m: i for i, m in enumerate(MODES)}
    lines = [head + "XFAIL: Dict[Tuple[str, str], str] = {"]
    for (op, m) in sorted(reasons, key=lambda k: (k[0], order[k[1]])):
        lines.append(f"    ({op!r}, {m!r}):\n        {reasons[(op, m)]!r},")
    lines += ["}", "", "# the samples (indices) each pair failed on in the run that made the list",
              "XFAIL_SAMPLES: Dict[Tuple[str, str], Tuple[int, ...]] = {"]
    for (op, m) in sorted(reasons, key=lambda k: (k[0], order[k[1]])):
        lines.append(f"    ({op!r}, {m!r}): {tuple(sorted(samples[(op, m)]))!r},")
    lines.append("}")
    return "\n".join(lines) + "\n"


def table(records: List[Dict[str, Any]], meta: Dict[str, Any]) -> str:
    """docs/opinfo.md."""
    modes = [m for m in MODES if any(r["mode"] == m for r in records)]
    lines = [
        "# PyTorch's OpInfo samples through the torch.compile backend",
        "",
        "Generated by `python -m fxhlo.opinfo` (python/fxhlo/opinfo.py; its module doc gives "
        "the rules); do not edit by hand.",
        "",
        f"Command: `{meta['command']}`  ",
        f"torch {meta['torch']}; first samples per OpInfo and mode: {meta['k']}; CPU, strict mode, "
        f"`dynamic=False, fullgraph=True`; {meta['jobs']} worker processes; "
        f"{meta['seconds']:.0f} s of wall time ({meta['date']}).",
        "",
        "A sample is *counted* when eager and `backend=\"aot_eager\"` both run it and agree; "
        "it then passes, is a mismatch (a wrong answer), needs an op fxhlo lacks (unsupported: "
        "strict mode refuses it), is a compile error (fxhlo's own error) or a crash (any other "
        "exception, or the worker died or timed out).  Tolerances: `torch.testing.assert_close`'s "
        "defaults for the dtype (f32 rtol 1.3e-6 atol 1e-5; bf16 rtol 1.6e-2 atol 1e-5), and "
        "where fxhlo and eager differ beyond them, fxhlo's error against a float64 run may not "
        "exceed eager's plus that tolerance; sort/top-k index outputs may differ in tie order "
        "only; eigenvectors and singular vectors (linalg.eigh, linalg.svd, svd) in the sign of "
        "each vector only (u_i and v_i together), a flipped vector's gradient compared with "
        "eager's for the flipped cotangent.",
        "",
    ]
    at = next(i for i, x in enumerate(lines) if x.startswith("torch ")) + 1
    for u in reversed(meta.get("updates", [])):
        lines.insert(at, f"Then, for the OpInfos changed since (their records replaced): `{u}`  ")
    lines += [
        "| mode | OpInfos | samples | counted | pass | pass % | mismatch | crash | compile error "
        "| unsupported | not counted | sample s |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    sums = {m: summary(records, m) for m in modes}
    for m in modes:
        s = sums[m]
        lines.append(f"| {m} | {s['opinfos']} | {s['samples']} | {s['counted']} | {s['pass']} | "
                     f"{s['pass_pct']:.1f} | {s['mismatch']} | {s['crash']} | "
                     f"{s['compile_error']} | {s['unsupported']} | {s['not_counted']} | "
                     f"{s['sample_seconds']:.0f} |")
    lines += ["", "*sample s*: the seconds the samples took, summed over the worker processes "
              "(each runs one sample at a time on one thread)."]
    for m in modes:
        s = sums[m]
        lines += ["", f"## {m}", ""]
        bad = [r for r in records if r["mode"] == m
               and r["status"] in ("mismatch", "crash", "compile-error")]
        if bad:
            lines += ["Failures other than unsupported ops:", ""]
            for r in bad:
                d = r.get("detail", "").replace("|", "\\|")
                lines.append(f"- `{r['op']}` #{r['sample']}: {r['status']}: {d}")
            lines.append("")
        if s["unsupported_ops"]:
            lines += [f"Ops fxhlo lacks ({s['unsupported']} samples; a sample may need "
                      f"several):", "", "| op | samples | OpInfos |", "|---|---:|---|"]
            for o, n in s["unsupported_ops"].items():
                who = sorted({r["op"] for r in records if r["mode"] == m
                              and o in r.get("unsupported", [])})
                shown = ", ".join(who[:8]) + (", ..." if len(who) > 8 else "")
                lines.append(f"| `{o}` | {n} | {shown} |")
            lines.append("")
        nc = collections.Counter((r.get("detail", "").split(":")[0])
                                 for r in records if r["mode"] == m
                                 and r["status"] == "not-counted")
        if nc:
            lines += ["Not counted: " + ", ".join(f"{n} ({w})" for w, n in nc.most_common()),
                      ""]
    try:
        ci = set(ci_tasks())
    except Exception:  # noqa: BLE001 - no op_db here
        ci = set()
    ci_recs = [r for r in records if (r["op"], r["mode"], r["sample"]) in ci]
    if ci_recs:
        secs = sum(r.get("seconds", 0.0) for r in ci_recs)
        lines += [
            "## CI",
            "",
            f"python/tests/test_opinfo.py runs a fixed subset (`fxhlo.opinfo.ci_tasks()`: the "
            f"first sample of every OpInfo forward in f32, and the first sample of one OpInfo "
            f"in {CI_SHARDS}, by a hash of its name, forward+backward in f32 and forward in "
            f"bf16: {len(ci)} tasks) in 2 worker processes and fails on a failure not listed "
            f"in python/fxhlo/opinfo_xfail.py and on a listed (OpInfo, mode) that passes.  "
            f"Those samples took {secs:.0f} s in this run, about {secs / 2 / 60:.1f} minutes "
            f"on 2 workers, plus ~20 s to start them (on this run's machine; it was shared "
            f"with other jobs).",
            "",
        ]
    lines += meta.get("notes", [])
    return "\n".join(lines).rstrip() + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--ops", help="comma-separated OpInfo names (name or name.variant; default "
                                 "all)")
    p.add_argument("--modes", default=",".join(MODES), help=f"default {','.join(MODES)}")
    p.add_argument("-k", "--samples", type=int, default=3,
                   help="samples per OpInfo and mode (the first K)")
    p.add_argument("--k-mode", action="append", default=[], metavar="MODE=K",
                   help="another K for one mode, e.g. fwdbwd-f32=1")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT,
                   help="seconds per sample before it counts as a crash")
    p.add_argument("--json", help="write every record here")
    p.add_argument("--table", help="write the markdown report here (docs/opinfo.md)")
    p.add_argument("--backend", default="fxhlo",
                   help="another backend (aot_eager) validates the harness: all counted pass")
    p.add_argument("--always-aot-eager", action="store_true",
                   help="run aot_eager on every sample first (by default only on the samples "
                        "fxhlo does not pass)")
    p.add_argument("--from-json", metavar="JSON",
                   help="run nothing: the report (--table, --write-xfail, --check-xfail) of "
                        "an earlier run's records")
    p.add_argument("--note", action="append", default=[],
                   help="a line for the report's end (kept in the JSON's meta)")
    p.add_argument("--resume", action="store_true",
                   help="keep the records of JSON.partial (an interrupted run with the same "
                        "--json) and run only the other tasks")
    p.add_argument("--update", metavar="JSON",
                   help="records of an earlier run: those of the (OpInfo, mode) pairs run now "
                        "are replaced, the merged records written (to --json, else here)")
    p.add_argument("--write-xfail", action="store_true",
                   help="rewrite fxhlo/opinfo_xfail.py from the records (every failing pair)")
    p.add_argument("--ci", action="store_true",
                   help="run the subset CI runs (python/tests/test_opinfo.py) instead")
    p.add_argument("--check-xfail", action="store_true",
                   help="exit 1 on failures not in fxhlo/opinfo_xfail.py and on its entries "
                        "that pass")
    p.add_argument("-v", "--verbose", action="store_true")
    a = p.parse_args(argv)
    modes = list(MODES) if a.ci else a.modes.split(",")
    for m in modes:
        if m not in MODES:
            p.error(f"unknown mode {m!r}; modes: {', '.join(MODES)}")
    import torch
    names = list(_ops_by_name())
    if a.ops:
        want = a.ops.split(",")
        unknown = [w for w in want if w not in names and not any(n.split(".")[0] == w
                                                                 for n in names)]
        if unknown:
            p.error(f"unknown OpInfo(s): {', '.join(unknown)}")
        names = [n for n in names if n in want or n.split(".")[0] in want]
    if a.from_json:
        with open(a.from_json) as f:
            data = json.load(f)
        meta, records = data["meta"], data["records"]
        meta["notes"] = meta.get("notes", []) + a.note
        if a.note:
            with open(a.from_json, "w") as f:
                json.dump({"meta": meta, "records": records}, f, indent=1)
        return _report(a, meta, records)
    t0 = time.time()
    if a.ci:
        a.samples = 1
        tasks = ci_tasks()
        kdesc = "the CI subset (fxhlo.opinfo.ci_tasks), 1"
    else:
        ks = {kv.split("=")[0]: int(kv.split("=")[1]) for kv in a.k_mode}
        tasks = tasks_for(names, modes, a.samples, ks)
        kdesc = ", ".join(f"{m} {ks.get(m, a.samples)}" for m in modes)
        a.samples = max([a.samples] + list(ks.values()))
    done: List[Dict[str, Any]] = []
    if a.resume and a.json and os.path.exists(a.json + ".partial"):
        with open(a.json + ".partial") as f:
            done = [json.loads(line) for line in f if line.strip()]
        want = set(tasks)
        done = [r for r in done if (r["op"], r["mode"], r["sample"]) in want]
        have = {(r["op"], r["mode"], r["sample"]) for r in done}
        print(f"resuming: {len(done)} records kept", file=sys.stderr)
        tasks = [t for t in tasks if t not in have]
    records = done + run(tasks, a.samples, a.jobs, a.timeout, a.verbose, a.backend,
                         a.always_aot_eager, a.json + ".partial" if a.json else None)
    secs = time.time() - t0
    if a.update:
        with open(a.update) as f:
            old = json.load(f)
        ran = {(t[0], t[1]) for t in tasks}
        kept = [r for r in old["records"] if (r["op"], r["mode"]) not in ran]
        print(f"updated {len(ran)} (OpInfo, mode) pairs of {a.update}: {len(records)} records "
              f"now, {len(kept)} kept")
        records = kept + records
        meta_old = old["meta"]
        argv = list(argv if argv is not None else sys.argv[1:])
        meta_old.setdefault("updates", []).append(
            "python -m fxhlo.opinfo " + " ".join(argv) + f" ({secs:.0f} s)")
        if not a.json:
            a.json = a.update
    meta = {"command": "python -m fxhlo.opinfo " + " ".join(argv if argv is not None
                                                            else sys.argv[1:]),
            "torch": torch.__version__, "k": kdesc, "jobs": a.jobs, "seconds": secs,
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())}
    if a.update:
        meta = meta_old
    meta["notes"] = meta.get("notes", []) + a.note
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"meta": meta, "records": records}, f, indent=1)
    print(f"({secs:.0f} s)")
    return _report(a, meta, records)


def _report(a, meta: Dict[str, Any], records: List[Dict[str, Any]]) -> int:
    modes = [m for m in MODES if any(r["mode"] == m for r in records)]
    for m in modes:
        s = summary(records, m)
        print(f"{m}: {s['counted']} counted of {s['samples']} samples ({s['opinfos']} OpInfos): "
              f"pass {s['pass']} ({s['pass_pct']:.1f}%), mismatch {s['mismatch']}, crash "
              f"{s['crash']}, compile error {s['compile_error']}, unsupported "
              f"{s['unsupported']} ({len(s['unsupported_ops'])} ops), not counted "
              f"{s['not_counted']}")
    if a.table:
        with open(a.table, "w") as f:
            f.write(table(records, meta))
    if a.write_xfail:
        src = xfail_source(records)
        with open(os.path.join(os.path.dirname(__file__), "opinfo_xfail.py"), "w") as f:
            f.write(src)
    if a.check_xfail:
        unexpected, passes = check_xfail(records)
        for (op, m), sts in sorted(unexpected.items()):
            print(f"unexpected failure: ({op!r}, {m!r}): {', '.join(sorted(set(sts)))}")
        for op, m in passes:
            print(f"unexpected pass (remove from opinfo_xfail.py): ({op!r}, {m!r})")
        return 1 if unexpected or passes else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
