"""Freezing under torch.compile (fxhlo/freezing.py): parameters and buffers of an inference
graph are compiled as constants, and a weight changed after compilation is never silently
ignored."""

import warnings

import pytest
import torch

import fxhlo
from fxhlo.backend import FxhloFallbackWarning
from fxhlo.runner import STATS


class ConvNet(torch.nn.Module):
    """conv + batch norm (its running statistics are buffers) + linear."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8, 5)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.fc(y.mean((2, 3)))


def _model():
    torch.manual_seed(0)
    m = ConvNet().eval()
    with torch.no_grad():  # statistics that are not the identity, so folding them matters
        m.bn.running_mean.uniform_(-0.5, 0.5)
        m.bn.running_var.uniform_(0.5, 2.0)
    return m


def _frozen_counts():
    return {k: g["frozen"] for k, g in fxhlo.stats()["graphs"].items()}


# every test: fresh Dynamo caches, zeroed backend counters, a private compile cache
pytestmark = pytest.mark.usefixtures("fresh_backend")


def _compile(m, **opts):
    return torch.compile(m, backend="fxhlo", options={"cache": False, **opts})


def test_parameters_and_buffers_are_frozen_under_no_grad():
    m, x = _model(), torch.randn(2, 3, 8, 8)
    c = _compile(m)
    with torch.no_grad():
        got = c(x)
    torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-5)
    # conv weight + bias, bn weight + bias + running mean + var, fc weight + bias
    assert list(_frozen_counts().values()) == [8]


def test_freezing_off_and_grad_mode_compile_unfrozen():
    m, x = _model(), torch.randn(2, 3, 8, 8)
    with torch.no_grad():
        got = _compile(m, freezing=False)(x)
    torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-5)
    assert list(_frozen_counts().values()) == [0]
    torch._dynamo.reset()
    STATS.reset()
    got = _compile(m)(x)  # grad mode on: a forward graph for training, never frozen
    got.sum().backward()
    assert m.fc.weight.grad is not None
    assert all(v == 0 for v in _frozen_counts().values())


@pytest.mark.parametrize("change", ["in_place", "replaced", "buffer"])
def test_a_changed_weight_is_never_ignored(change):
    m, x = _model(), torch.randn(2, 3, 8, 8)
    c = _compile(m)
    with torch.no_grad():
        c(x)
        if change == "in_place":
            m.fc.weight.mul_(2.0)
        elif change == "replaced":
            m.fc.weight = torch.nn.Parameter(m.fc.weight * 3.0)
        else:
            m.bn.running_mean.add_(1.0)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            got = c(x)
            again = c(x)
        want = m(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(again, want, rtol=1e-4, atol=1e-5)
    msgs = [str(r.message) for r in w if issubclass(r.category, FxhloFallbackWarning)]
    if change == "replaced" and not msgs:
        # Dynamo may guard the module's attribute itself and retrace: then the new weight is
        # a new graph's input (compiled again, frozen); the answer above is what matters
        return
    assert len(msgs) == 1, msgs
    assert "compiling the graph again without freezing" in msgs[0]


class Counter(torch.nn.Module):
    """A buffer the graph updates in place (as a KV cache or a step counter): never frozen."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("acc", torch.zeros(4))

    def forward(self, x):
        self.acc.add_(x.sum(0))
        return self.lin(x) + self.acc


def test_a_buffer_the_graph_mutates_is_not_frozen():
    torch.manual_seed(0)
    m, ref = Counter().eval(), Counter().eval()
    ref.load_state_dict(m.state_dict())
    c = _compile(m)
    with torch.no_grad():
        for i in range(3):
            x = torch.randn(3, 4) + i
            torch.testing.assert_close(c(x), ref(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(m.acc, ref.acc)
    # the linear's weight and bias are frozen, the buffer is not
    assert max(_frozen_counts().values()) == 2


def test_large_weights_go_by_address_and_skip_the_disk_cache(monkeypatch, tmp_path):
    import fxhlo.runner as runner
    monkeypatch.setattr(runner, "CACHE_MAX_WEIGHT_BYTES", 1024)  # ConvNet's ~1.2 KiB frozen
    m, x = _model(), torch.randn(2, 3, 8, 8)
    c = torch.compile(m, backend="fxhlo", options={"cache_dir": str(tmp_path), "strict": True})
    with torch.no_grad():
        got = c(x)
    torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-5)
    assert list(_frozen_counts().values()) == [8]
    st = fxhlo.stats()
    assert st["graphs_compiled"] == 1 and st["cache_misses"] == 0
    assert not any(p.is_file() for p in tmp_path.rglob("*"))


def test_weights_by_address_are_checked():
    import fxhlo._native as native
    graph = ('{"format": "fxhlo-graph", "version": 1, "inputs": [{"name": "w", "kind": '
             '"constant", "type": "f32[2]"}], "nodes": [], "outputs": ["w"]}')
    w = torch.tensor([1.0, 2.0])
    with pytest.raises(native.CompileError, match="weight 'w': 4 bytes"):
        native.compile_with_weights(graph, [("w", "f32", [2], w.data_ptr(), 4)])
    with pytest.raises(native.CompileError, match="unknown dtype 'f33'"):
        native.compile_with_weights(graph, [("w", "f33", [2], w.data_ptr(), 8)])
    with pytest.raises(native.CompileError, match="overflows"):
        native.compile_with_weights(graph, [("w", "f32", [2**40, 2**40], w.data_ptr(), 8)])


class WithConstant(torch.nn.Module):
    """A lifted tensor constant (a get_attr of the graph) beside the frozen parameters."""

    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x) * torch.tensor([1.0, 2.0, 3.0, 4.0])


def test_graph_constants_survive_freezing():
    torch.manual_seed(0)
    m, x = WithConstant().eval(), torch.randn(3, 4)
    with torch.no_grad():
        got = _compile(m, strict=True)(x)
    torch.testing.assert_close(got, m(x))
    assert list(_frozen_counts().values()) == [2]
