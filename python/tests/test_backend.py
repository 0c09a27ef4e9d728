"""Tests of the torch.compile backend (docs/torch-backend.md): numerics vs eager for inference
and training, fallback, aliasing, dynamic shapes, options and the compile cache.

Run from python/tests with the package installed (scripts/test does it).  Compile times and
graph-break counts are printed (pytest -s shows them).
"""

import copy
import json
import os
import subprocess
import sys
import time
import warnings

import pytest

torch = pytest.importorskip("torch")
fxhlo_native = pytest.importorskip("fxhlo._native")

from torch import nn  # noqa: E402

from fxhlo import models  # noqa: E402
from fxhlo.backend import FxhloFallbackWarning, FxhloInterpreterWarning  # noqa: E402
from fxhlo.runner import STATS  # noqa: E402

# The project's f32 tolerance (meta.json of every testdata model uses it unless stated).
RTOL, ATOL = 1e-4, 1e-5

# Graphs the compiler refuses today (the backend then runs them in eager, with a warning, so
# numerics still hold); test_compiled_without_fallback xfails on these and passes once fixed.
KNOWN_COMPILER_FAILURES = {
    ("transformer_encoder", "inference"): "nn.TransformerEncoderLayer's fused inference fast "
                                          "path aten._transformer_encoder_layer_fwd is not in "
                                          "the op table (runs in eager)",
}


# every test: fresh Dynamo caches, zeroed backend counters, a private compile cache
pytestmark = pytest.mark.usefixtures("fresh_backend")


def _flat(out):
    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, dict):
        return [v for v in out.values() if isinstance(v, torch.Tensor)]
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flat(o)]
    if hasattr(out, "to_tuple"):
        return _flat(out.to_tuple())
    return []


def _assert_close(got, want, rtol=RTOL, atol=ATOL, what="output"):
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want), f"{what}: {len(got)} tensors, eager has {len(want)}"
    for i, (a, b) in enumerate(zip(got, want)):
        assert a.dtype == b.dtype and a.shape == b.shape, \
            f"{what} {i}: {a.dtype}{list(a.shape)} vs eager {b.dtype}{list(b.shape)}"
        if a.is_floating_point():
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, msg=lambda m: f"{what} {i}: {m}")
        else:
            assert torch.equal(a, b), f"{what} {i} differs"


def _tol(name):
    spec = models.REGISTRY[name]
    t = spec.tolerance or {"rtol": RTOL, "atol": ATOL}
    return t["rtol"], t["atol"]


def _loss(out):
    return sum((t.float() ** 2).mean() for t in _flat(out) if t.is_floating_point())


def _compiled(model, **options):
    return torch.compile(model, backend="fxhlo", options=options or None)


def _graph_breaks(model, inputs):
    ex = torch._dynamo.explain(model)(*inputs)
    torch._dynamo.reset()
    return ex.graph_count, ex.graph_break_count


def _report(what, **kv):
    print(f"\n[fxhlo backend] {what}: " + ", ".join(f"{k}={v}" for k, v in kv.items()))


# ------------------------------------------------------------------------------ registration

def test_backend_registered_by_entry_point():
    from importlib.metadata import entry_points
    eps = entry_points(group="torch_dynamo_backends")
    assert "fxhlo" in eps.names
    assert "fxhlo" in torch._dynamo.list_backends()


# ------------------------------------------------------------------------- testdata models

MODEL_NAMES = sorted(models.REGISTRY)
TRAIN_NAMES = [n for n in MODEL_NAMES if n != "reductions"]  # reductions has no parameters


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_inference_matches_eager(name):
    model, inputs = models.build(name)
    with torch.no_grad():
        want = model(*inputs)
        graphs, breaks = _graph_breaks(model, inputs)
        cm = _compiled(model)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = cm(*inputs)
        first = time.perf_counter() - t0
        got2 = cm(*inputs)
    rtol, atol = _tol(name)
    _assert_close(got, want, rtol, atol)
    _assert_close(got2, want, rtol, atol)
    _report(f"{name} inference", graphs=graphs, graph_breaks=breaks,
            first_call_s=f"{first:.2f}", fxhlo_compile_s=f"{STATS.compile_seconds:.3f}",
            compiled=STATS.graphs_compiled, fallbacks=[str(x.message)[:120] for x in w])


@pytest.mark.parametrize("name", TRAIN_NAMES)
def test_training_step_matches_eager(name):
    model, inputs = models.build(name)
    model.train()
    ref = copy.deepcopy(model)
    # a small step: f32 rounding differences in the first gradients must not be amplified
    # (resnet18 with training-mode batch norm over one image is chaotic under large steps)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=1e-3)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    cm = _compiled(model)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(2):  # two steps: the second runs the compiled graphs on updated weights
            opt_ref.zero_grad()
            opt.zero_grad()
            lr_ = _loss(ref(*inputs))
            lc = _loss(cm(*inputs))
            lr_.backward()
            lc.backward()
            # Deep nets (resnet18: 20 conv layers with training-mode batch norm over a tiny
            # batch) accumulate f32 rounding in a different summation order; the registry's
            # atol for the model (1e-4 for resnet18) is used, not a wider one.
            rtol, atol = _tol(name)
            torch.testing.assert_close(lc, lr_, rtol=rtol, atol=atol)
            for (pn, p), q in zip(model.named_parameters(), ref.parameters()):
                assert (p.grad is None) == (q.grad is None), pn
                if p.grad is not None:
                    torch.testing.assert_close(p.grad, q.grad, rtol=rtol, atol=atol,
                                               msg=lambda m: f"grad of {pn}: {m}")
            opt_ref.step()
            opt.step()
    for b1, b2 in zip(model.buffers(), ref.buffers()):  # batch norm running stats
        torch.testing.assert_close(b1, b2, rtol=RTOL, atol=ATOL)
    _report(f"{name} training", compiled=STATS.graphs_compiled,
            fxhlo_compile_s=f"{STATS.compile_seconds:.3f}",
            fallbacks=[str(x.message)[:120] for x in w])


@pytest.mark.parametrize("name,mode", [(n, "inference") for n in MODEL_NAMES]
                         + [(n, "training") for n in TRAIN_NAMES])
def test_compiled_without_fallback(name, mode):
    """Every graph of the testdata models is compiled by fxhlo (no eager fallback)."""
    if (name, mode) in KNOWN_COMPILER_FAILURES:
        pytest.xfail(KNOWN_COMPILER_FAILURES[(name, mode)])
    model, inputs = models.build(name)
    cm = _compiled(model, strict=True)
    if mode == "inference":
        with torch.no_grad():
            cm(*inputs)
    else:
        model.train()
        _loss(cm(*inputs)).backward()
    assert STATS.fallback_graphs == 0, STATS.events
    assert STATS.graphs_compiled + STATS.cache_hits >= (1 if mode == "inference" else 2)


# ------------------------------------------------------------------------ real-world models

def test_torchvision_resnet18():
    tv = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    model = tv.models.resnet18(weights=None, num_classes=10).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        want = model(x)
        graphs, breaks = _graph_breaks(model, (x,))
        cm = _compiled(model)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = cm(x)
        first = time.perf_counter() - t0
    # 20 convolutions deep with random init: outputs are O(1) sums of many f32 products;
    # rounding in another summation order reaches ~1e-5 absolute, hence atol 1e-4.
    _assert_close(got, want, rtol=1e-4, atol=1e-4)
    _report("torchvision resnet18 inference 2x3x64x64", graphs=graphs, graph_breaks=breaks,
            first_call_s=f"{first:.2f}", fxhlo_compile_s=f"{STATS.compile_seconds:.3f}",
            fallbacks=[str(m.message)[:120] for m in w])

    # One training step (batch norm in training mode). With batch 2, the last stages
    # normalize over 2 x 2 x 2 values, so the backward pass amplifies f32 rounding: eager f32
    # itself is up to ~2e-2 away from the float64 gradients on conv1.weight (measured). The
    # reference is therefore the same step in float64, and fxhlo's f32 gradients must be
    # within 1e-4 of it (they are within ~1e-5) and never worse than eager f32's.
    model.train()
    ref = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double()
    torch._dynamo.reset()
    cm = _compiled(model)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        lc = _loss(cm(x))
        lc.backward()
    lr_ = _loss(ref(x))
    lr_.backward()
    l64 = _loss(ref64(x.double()))
    l64.backward()
    torch.testing.assert_close(lc, lr_, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lc.double(), l64.double(), rtol=1e-4, atol=1e-4)
    for (pn, p), q, r in zip(model.named_parameters(), ref.parameters(), ref64.parameters()):
        torch.testing.assert_close(p.grad.double(), r.grad, rtol=1e-4, atol=1e-4,
                                   msg=lambda m: f"grad of {pn} vs float64: {m}")
        err_fx = (p.grad.double() - r.grad).abs().max().item()
        err_eager = (q.grad.double() - r.grad).abs().max().item()
        assert err_fx <= max(err_eager, 1e-5), f"grad of {pn}: fxhlo {err_fx} vs eager {err_eager}"


def _small_gpt2():
    transformers = pytest.importorskip("transformers")
    cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256,
                                  n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                  attn_pdrop=0.0, use_cache=False)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg), cfg


def test_transformers_gpt2():
    model, cfg = _small_gpt2()
    model.eval()
    ids = torch.randint(0, cfg.vocab_size, (2, 16))

    def logits(m, i):
        return m(input_ids=i, use_cache=False).logits

    with torch.no_grad():
        want = logits(model, ids)
        ex = torch._dynamo.explain(lambda i: logits(model, i))(ids)
        torch._dynamo.reset()
        cm = _compiled(model)
        t0 = time.perf_counter()
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = logits(cm, ids)
        first = time.perf_counter() - t0
    _assert_close(got, want)
    _report("transformers GPT-2 (2 layers, 64 wide) inference", graphs=ex.graph_count,
            graph_breaks=ex.graph_break_count, first_call_s=f"{first:.2f}",
            fxhlo_compile_s=f"{STATS.compile_seconds:.3f}",
            fallbacks=[str(m.message)[:120] for m in w])

    # a training step with the model's own loss
    model.train()
    ref = copy.deepcopy(model)
    torch._dynamo.reset()
    cm = _compiled(model)
    with warnings.catch_warnings(record=True):
        warnings.simplefilter("always")
        lc = cm(input_ids=ids, labels=ids, use_cache=False).loss
        lc.backward()
    lr_ = ref(input_ids=ids, labels=ids, use_cache=False).loss
    lr_.backward()
    torch.testing.assert_close(lc, lr_, rtol=RTOL, atol=ATOL)
    for (pn, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL,
                                   msg=lambda m: f"grad of {pn}: {m}")


def test_attention_as_math_matches_sdpa():
    """The backend traces scaled_dot_product_attention as math (so autograd differentiates it);
    it must agree with the fused kernels for every mask kind."""
    from fxhlo.decomp import _sdpa_math
    F = torch.nn.functional
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    keep = torch.rand(2, 1, 16, 16) > 0.3
    keep[..., 0] = True
    for kw in ({}, {"is_causal": True}, {"attn_mask": keep},
               {"attn_mask": torch.ones(16, 16, dtype=torch.bool).tril()},
               {"attn_mask": torch.randn(16, 16)}, {"is_causal": True, "scale": 0.3}):
        torch.testing.assert_close(_sdpa_math(q, k, v, **kw),
                                   F.scaled_dot_product_attention(q, k, v, **kw),
                                   rtol=RTOL, atol=ATOL, msg=lambda m: f"{kw}: {m}")


# -------------------------------------------------------------------------------- fallback

@torch.library.custom_op("fxhlo_test::twice", mutates_args=())
def _twice(x: torch.Tensor) -> torch.Tensor:
    # through numpy: an implementation that cannot be traced, so the backend cannot inline
    # the op and must run it in eager
    return torch.from_numpy(x.detach().numpy() * 2)


@_twice.register_fake
def _(x):
    return torch.empty_like(x)


def _twice_backward(ctx, grad):
    return grad * 2


_twice.register_autograd(_twice_backward)


class WithUnsupported(nn.Module):
    """linear -> a custom op fxhlo cannot know -> relu -> linear."""

    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 16)
        self.b = nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.relu(torch.ops.fxhlo_test.twice(self.a(x))))


def _fallback_warnings(w):
    """The messages of the warnings about parts run in eager (not those about steps run on
    the reference interpreter)."""
    return [str(m.message) for m in w if issubclass(m.category, FxhloFallbackWarning)
            and not issubclass(m.category, FxhloInterpreterWarning)]


def test_unsupported_op_is_partitioned_with_one_warning():
    torch.manual_seed(0)
    model = WithUnsupported()
    x = torch.randn(3, 8)
    with torch.no_grad():
        want = model(x)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = _compiled(model)(x)
    _assert_close(got, want)
    msgs = _fallback_warnings(w)
    assert len(msgs) == 1, msgs
    assert "fxhlo_test.twice.default" in msgs[0]
    assert STATS.partitions == 2  # the linear before and the relu + linear after
    assert STATS.graphs_compiled + STATS.cache_hits == 2


def test_unsupported_op_training():
    torch.manual_seed(0)
    model = WithUnsupported()
    ref = copy.deepcopy(model)
    x = torch.randn(3, 8)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        _compiled(model)(x).square().sum().backward()
    ref(x).square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=RTOL, atol=ATOL)
    msgs = _fallback_warnings(w)
    assert len(msgs) == 1 and "fxhlo_test.twice.default" in msgs[0], msgs


def test_unsupported_aten_op_embedding_bag():
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(20, 6, mode="mean")
    lin = nn.Linear(6, 3)
    model = nn.Sequential()
    ids = torch.randint(0, 20, (4, 5))

    def f(i):
        return lin(bag(i)).tanh()

    with torch.no_grad():
        want = f(ids)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = torch.compile(f, backend="fxhlo")(ids)
    del model
    _assert_close(got, want)
    msgs = _fallback_warnings(w)
    assert len(msgs) == 1 and "aten._embedding_bag" in msgs[0], msgs


def test_strict_raises_instead_of_falling_back():
    model = WithUnsupported()
    with pytest.raises(Exception, match="fxhlo_test.twice"):
        with torch.no_grad():
            _compiled(model, strict=True)(torch.randn(3, 8))


# ------------------------------------------------------------------- outputs and aliasing

class Aliasing(nn.Module):
    def forward(self, x, y):
        z = x * 2 + y
        return x, x.t(), z, z.view(-1), x[1:], None, x.shape[0], (y + 1, {"k": z.sum()})


def test_outputs_alias_inputs_and_mixed_structures():
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    want = Aliasing()(x, y)
    with torch.no_grad():
        got = _compiled(Aliasing())(x, y)
    assert got[0] is x or got[0].data_ptr() == x.data_ptr()
    # views of inputs alias their inputs as in eager
    assert got[1].data_ptr() == x.data_ptr() and got[1].stride() == x.t().stride()
    assert got[4].data_ptr() == x[1:].data_ptr()
    assert got[5] is None and got[6] == 3
    _assert_close(got, want)
    assert STATS.graphs_compiled + STATS.cache_hits == 1 and STATS.fallback_graphs == 0
    x.add_(1)  # the aliases see the mutation, as in eager
    torch.testing.assert_close(got[1], x.t())


def test_non_contiguous_inputs_and_no_grad_for_some_inputs():
    w = torch.randn(6, 5, requires_grad=True)
    b = torch.randn(5)  # no grad: its gradient output is None in the backward graph

    def f(x):
        return torch.tanh(x @ w + b)

    x = torch.randn(6, 5).t()  # non-contiguous, made contiguous once per call
    got = torch.compile(f, backend="fxhlo")(x)
    got.sum().backward()
    g = w.grad.clone()
    w.grad = None
    want = f(x)
    want.sum().backward()
    _assert_close(got, want)
    torch.testing.assert_close(g, w.grad, rtol=RTOL, atol=ATOL)
    assert STATS.fallback_graphs == 0, STATS.events


# ------------------------------------------------------------------------ dynamic shapes

def test_static_shapes_recompile_per_shape():
    model, _ = models.build("mlp")
    cm = torch.compile(model, backend="fxhlo", dynamic=False)
    with torch.no_grad():
        for b in (2, 5, 5, 3):
            x = torch.randn(b, 32)
            _assert_close(cm(x), model(x))
    assert STATS.graphs_compiled + STATS.cache_hits == 3
    assert STATS.fallback_graphs == 0


@pytest.mark.parametrize("dynamic", [True, None])
def test_dynamic_shapes_specialize_per_shape(dynamic):
    """dynamic=True graphs (and the automatic dynamic graph Dynamo makes after a shape change)
    have symbolic sizes: the backend compiles one static specialization per shape."""
    model, _ = models.build("mlp")
    cm = torch.compile(model, backend="fxhlo", dynamic=dynamic)
    with torch.no_grad(), warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for b in (2, 5, 5, 3):
            x = torch.randn(b, 32)
            _assert_close(cm(x), model(x))
    assert not _fallback_warnings(w)
    assert STATS.graphs_compiled + STATS.cache_hits == 3
    x = torch.randn(4, 32, requires_grad=True)
    cm(x).sum().backward()
    g = x.grad.clone()
    x.grad = None
    model(x).sum().backward()
    torch.testing.assert_close(g, x.grad, rtol=RTOL, atol=ATOL)


class _NormBlock(torch.nn.Module):
    def __init__(self, eps):
        super().__init__()
        self.ln = torch.nn.LayerNorm(16, eps=eps)
        self.fc = torch.nn.Linear(16, 16)

    def forward(self, x):
        return self.fc(self.ln(x)).relu()


def test_dynamic_graph_reading_a_float_attribute_is_compiled():
    """With dynamic=True Dynamo passes a module's float attribute (LayerNorm's eps) as a 0-d
    tensor read with .item(); tracing that on fake tensors is data-dependent, so the whole
    graph ran in eager. Its value is now part of each specialization (and a constant of it)."""
    torch.manual_seed(0)
    model = _NormBlock(1e-5)
    cm = torch.compile(model, backend="fxhlo", dynamic=True, options={"strict": True})
    with torch.no_grad():
        for t in (5, 7, 5):
            x = torch.randn(2, t, 16)
            _assert_close(cm(x), model(x))
        model.ln.eps = 0.5  # another value: another specialization, not the first one's
        x = torch.randn(2, 7, 16)
        _assert_close(cm(x), model(x))
    assert STATS.fallback_graphs == 0
    assert STATS.graphs_compiled + STATS.cache_hits == 3


# ------------------------------------------------------------------------- options, errors

def test_options(tmp_path):
    model, inputs = models.build("mlp")
    with pytest.raises(Exception, match="unknown option"):
        with torch.no_grad():
            _compiled(model, bogus=1)(*inputs)
    torch._dynamo.reset()
    dump = tmp_path / "dump"
    with torch.no_grad():
        got = _compiled(model, opt_level=0, threads=1, dump_dir=str(dump),
                        cache_dir=str(tmp_path / "c2"))(*inputs)
        _assert_close(got, model(*inputs))
    graphs = sorted(dump.glob("*/graph.json"))
    assert graphs, "dump_dir holds no graph"
    # the dumped graph is ready for the CLI: the native reader accepts it
    assert "aten.addmm" in fxhlo_native.inspect(str(graphs[0]))
    assert any((tmp_path / "c2").rglob("*.fxa"))


def test_native_errors_are_exceptions():
    with pytest.raises(fxhlo_native.CompileError):
        fxhlo_native.compile("not json")
    with pytest.raises(fxhlo_native.FxhloError):
        fxhlo_native.load_artifact(b"garbage")
    g = {"format": "fxhlo-graph", "version": 1, "inputs": [
        {"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [2]}}],
        "nodes": [{"name": "r", "op": "aten.relu.default", "args": {"self": {"tensor": "x"}},
                   "results": [{"name": "r", "type": {"dtype": "f32", "shape": [2]}}]}],
        "outputs": ["r"]}
    c = fxhlo_native.compile(json.dumps(g), None, opt_level=2, threads=1)
    assert c.input_specs() == [("x", "f32", [2])]
    x, out = torch.tensor([-1.0, 2.0]), torch.empty(2)
    c.run_ptrs([x.data_ptr()], [out.data_ptr()])
    assert out.tolist() == [0.0, 2.0]
    with pytest.raises(fxhlo_native.ExecutionError):
        c.run_ptrs([], [out.data_ptr()])
    c2 = fxhlo_native.load_artifact(c.to_bytes())
    assert c2.output_specs() == c.output_specs()


_OOM_SCRIPT = r"""
import json, resource, sys
import torch
from fxhlo import _native
n = 1 << 26
g = {"format": "fxhlo-graph", "version": 1, "inputs": [
    {"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [n]}}],
    "nodes": [{"name": "m", "op": "aten.gt.Scalar",
               "args": {"self": {"tensor": "x"}, "other": {"float": 0.0}},
               "results": [{"name": "m", "type": {"dtype": "bool", "shape": [n]}}]}],
    "outputs": ["m"]}
c = _native.compile(json.dumps(g), None, opt_level=2, threads=1)
x, out = torch.ones(n), torch.zeros(n, dtype=torch.bool)
c.run_ptrs([x.data_ptr()], [out.data_ptr()])  # the buffers the executor keeps are made
assert bool(out.all())
# The address space in use now plus 160 MiB: room for the 64 MiB bool result a call makes,
# not for the kernel's scratch (n f32 values, 256 MiB, which fxhlo before this test aborted on).
used = int(open("/proc/self/statm").read().split()[0]) * resource.getpagesize()
resource.setrlimit(resource.RLIMIT_AS, (used + (160 << 20), resource.RLIM_INFINITY))
try:
    c.run_ptrs([x.data_ptr()], [out.data_ptr()])
except MemoryError as e:
    print("MemoryError:", e)
    sys.exit(0)
print("no error")
sys.exit(3)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="RLIMIT_AS and /proc")
def test_allocation_failure_in_a_call_is_memory_error():
    """A kernel's scratch that cannot be allocated (here under an address-space limit) raises
    MemoryError from the call instead of aborting the process."""
    r = subprocess.run([sys.executable, "-c", _OOM_SCRIPT], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "step 0 'm': scratch of 67108864 elements" in r.stdout, r.stdout


# ---------------------------------------------------------------------------- disk cache

_CACHE_SCRIPT = r"""
import json, logging, sys, time, io
import torch
stream = io.StringIO()
logging.basicConfig(stream=stream, level=logging.WARNING)
logging.getLogger("fxhlo").setLevel(logging.DEBUG)
from fxhlo import models
from fxhlo.runner import STATS
model, inputs = models.build("gpt2")
t0 = time.perf_counter()
with torch.no_grad():
    out = torch.compile(model, backend="fxhlo")(*inputs)
first = time.perf_counter() - t0
print(json.dumps({"hits": STATS.cache_hits, "misses": STATS.cache_misses,
                  "fxhlo_compile_s": STATS.compile_seconds, "first_call_s": first,
                  "sum": float(out.double().sum()), "log": stream.getvalue()}))
"""


def test_compile_cache_hit_in_a_second_process(tmp_path):
    env = dict(os.environ, FXHLO_CACHE_DIR=str(tmp_path / "cache"))
    runs = []
    for _ in range(2):
        p = subprocess.run([sys.executable, "-c", _CACHE_SCRIPT], env=env, capture_output=True,
                           text=True, timeout=600)
        assert p.returncode == 0, p.stderr[-3000:]
        runs.append(json.loads(p.stdout.strip().splitlines()[-1]))
    first, second = runs
    assert first["misses"] >= 1 and first["hits"] == 0, first
    assert second["misses"] == 0 and second["hits"] == first["misses"], second
    assert "cache hit" in second["log"] and "cache miss" in first["log"]
    assert first["sum"] == second["sum"]
    _report("compile cache (gpt2 testdata model, inference)",
            cold_fxhlo_compile_s=f"{first['fxhlo_compile_s']:.4f}",
            cached_fxhlo_compile_s=f"{second['fxhlo_compile_s']:.4f}",
            cold_first_call_s=f"{first['first_call_s']:.2f}",
            cached_first_call_s=f"{second['first_call_s']:.2f}")
