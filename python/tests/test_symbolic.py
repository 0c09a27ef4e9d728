"""Symbolic-shape graphs traced once and specialized per size (fxhlo/symbolic.py, issue 37)."""

import warnings

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("fxhlo._native")

from fxhlo.backend import FxhloFallbackWarning  # noqa: E402
from fxhlo.runner import STATS  # noqa: E402
from fxhlo.symbolic import SymbolicError, bind_symbols, specialize  # noqa: E402

RTOL, ATOL = 1e-4, 1e-5  # the project's f32 tolerance

pytestmark = pytest.mark.usefixtures("fresh_backend")


class Block(torch.nn.Module):
    """A pre-norm attention block whose sizes all follow the input's (batch, sequence)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln = torch.nn.LayerNorm(d)
        self.qkv = torch.nn.Linear(d, 3 * d)
        self.out = torch.nn.Linear(d, d)

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        pos = torch.arange(t)
        mask = pos[None, :] <= pos[:, None]
        s = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        a = s.masked_fill(~mask, float("-inf")).softmax(-1) @ v
        return x + self.out(a.transpose(1, 2).reshape(b, t, d))


def _frames():
    from torch._dynamo.utils import counters
    return counters["stats"]["unique_graphs"]


@pytest.mark.parametrize("dynamic", [True, None])
def test_one_trace_serves_every_size(dynamic):
    """Six sequence lengths at three batch sizes: one Dynamo graph and one aot trace (with
    dynamic=None, Dynamo's automatic dynamic: a static graph for the first shape, then a
    symbolic graph per dimension seen changing); each new size is one fxhlo compile of the
    specialized graph, a size seen before is none; every output matches eager."""
    torch.manual_seed(0)
    model = Block().eval()
    frames = _frames()
    cm = torch.compile(model, backend="fxhlo", dynamic=dynamic, options={"strict": True})
    # (a size of 1 is a graph of its own: Dynamo specializes sizes 0 and 1)
    sizes = [(b, t) for b in (2, 3, 4) for t in (3, 5, 8, 13, 21, 34)]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error", FxhloFallbackWarning)
        for b, t in sizes + sizes[:4]:
            x = torch.randn(b, t, 32)
            torch.testing.assert_close(cm(x), model(x), rtol=RTOL, atol=ATOL)
    if dynamic:
        assert STATS.symbolic_graphs == 1 and _frames() - frames == 1
        assert STATS.specializations == len(sizes)
        assert STATS.graphs_compiled + STATS.cache_hits == len(sizes)
    else:
        # a static graph for (2, 3); sequence length made symbolic, then batch too. Dynamo
        # tries its newest graph first, so the four sizes called again meet the last one,
        # which had not seen them: four more specializations
        assert STATS.symbolic_graphs == 2 and _frames() - frames == 3
        assert STATS.specializations == len(sizes) - 1 + 4
        assert STATS.graphs_compiled + STATS.cache_hits == len(sizes) + 4
    assert STATS.fallback_graphs == 0


def test_option_off_traces_per_shape():
    model = Block().eval()
    cm = torch.compile(model, backend="fxhlo", dynamic=True, options={"symbolic": False})
    with torch.no_grad():
        for t in (3, 5):
            x = torch.randn(2, t, 32)
            torch.testing.assert_close(cm(x), model(x), rtol=RTOL, atol=ATOL)
    assert STATS.symbolic_graphs == 0 and STATS.specializations == 0
    assert STATS.graphs_compiled + STATS.cache_hits == 2


def test_training_graphs_take_the_per_shape_path():
    """A graph that needs gradients is traced per shape (its forward saves sizes for the
    backward, which the substitution does not handle yet); the gradients match eager."""
    torch.manual_seed(0)
    model = Block()
    cm = torch.compile(model, backend="fxhlo", dynamic=True)
    for t in (3, 6):
        x = torch.randn(2, t, 32, requires_grad=True)
        cm(x).square().sum().backward()
        got = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None
        model(x).square().sum().backward()
        want = [p.grad for p in model.parameters()] + [x.grad]
        model.zero_grad()
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4)
    assert STATS.symbolic_graphs == 0


def _symbolic_graph():
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, y):
        return (x @ y).relu().sum(0, keepdim=True).expand(x.shape[0], -1) + x.shape[1]
    return make_fx(f, tracing_mode="symbolic")(torch.randn(4, 3), torch.randn(3, 5))


def test_bind_and_specialize_a_graph():
    gm = _symbolic_graph()
    assert any(isinstance(n.meta.get("val"), torch.SymInt) for n in gm.graph.nodes)
    x, y = torch.randn(6, 7), torch.randn(7, 2)
    sizes = bind_symbols(gm, [x, y])
    assert sorted(sizes.binding.values()) == [2, 6, 7]
    static = specialize(gm, sizes)
    for n in static.graph.nodes:
        v = n.meta.get("val")
        assert not isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)), n
        if isinstance(v, torch.Tensor):
            assert all(isinstance(s, int) for s in v.shape), n
    torch.testing.assert_close(static(x, y), gm(x, y))
    assert list(static(x, y).shape) == [6, 2]


def test_inconsistent_sizes_are_refused_by_name():
    gm = _symbolic_graph()
    with pytest.raises(SymbolicError, match="dim 0"):
        bind_symbols(gm, [torch.randn(6, 7), torch.randn(5, 2)])  # 7 and 5 are one symbol
    with pytest.raises(SymbolicError, match="2-d tensor"):
        bind_symbols(gm, [torch.randn(6), torch.randn(6, 2)])
    with pytest.raises(SymbolicError, match="inputs"):
        bind_symbols(gm, [torch.randn(6, 7)])


def test_generation_with_the_dynamic_kv_cache():
    """GPT-2 (the zoo's reduced config) generating 12 tokens with its DynamicCache: the
    tokens are eager's, the decoding graph is traced once and specialized per cache length."""
    from fxhlo import zoo
    m = zoo.models()["gpt2"]
    model = m.build().m.eval()
    ids = m.inputs(0)[0]
    kw = dict(max_new_tokens=12, do_sample=False, use_cache=True, pad_token_id=0,
              eos_token_id=None, disable_compile=True)
    frames = _frames()
    with torch.no_grad():
        want = model.generate(ids, **kw)
        model.forward = torch.compile(model.forward, backend="fxhlo")
        got = model.generate(ids, **kw)
    assert torch.equal(got, want)
    assert STATS.symbolic_graphs >= 1
    assert STATS.fallback_graphs == 0, STATS.events
    # prefill, the first decoding step (static), then one symbolic graph for every later step
    assert _frames() - frames == 3
    assert STATS.specializations == 10


def test_a_broken_guard_is_refused():
    """A guard the trace recorded (here s >= 4) that a call's sizes break is an error naming
    it (the Binder then runs that call in eager), and one that holds passes."""
    import types

    import sympy

    from fxhlo.symbolic import Sizes, check_guards
    s = sympy.Symbol("s0", integer=True, positive=True)
    env = types.SimpleNamespace(guards=[types.SimpleNamespace(expr=sympy.Ge(s, 4))])
    sizes = Sizes()
    sizes.binding[s] = 3
    with pytest.raises(SymbolicError, match="s0 >= 4"):
        check_guards(sizes, env)
    sizes.binding[s] = 4
    check_guards(sizes, env)
