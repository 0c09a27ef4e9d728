"""`.pt2` archives a user exports from models that are not in testdata (made of the same ops) run
through `fxhlo run` and match eager. The archives are written by `torch.export.save` directly,
not by fxhlo's dumper, so the reader is not tuned to the testdata.
"""

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
from safetensors.torch import load_file, save_file  # noqa: E402
from torch import nn  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def fxhlo_bin():
    b = os.environ.get("FXHLO_BIN") or os.path.join(REPO, "target", "release", "fxhlo")
    if not os.path.exists(b):
        pytest.skip(f"fxhlo binary not built ({b})")
    return b


class WideMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(20, 48)
        self.b = nn.Linear(48, 7)

    def forward(self, x):
        return self.b(torch.nn.functional.gelu(self.a(x))) * 0.5


class StridedCNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 6, 5, stride=2, padding=2)
        self.bn = nn.BatchNorm2d(6)
        self.c2 = nn.Conv2d(6, 4, 3, padding=1, groups=2)
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        y = torch.relu(self.bn(self.c1(x)))
        y = nn.functional.max_pool2d(self.c2(y), 3, stride=2, padding=1)
        return self.fc(y.mean(dim=(2, 3)))


class NormSoftmax(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(12)
        self.emb = nn.Embedding(30, 12)

    def forward(self, ids):
        h = self.ln(self.emb(ids))
        att = torch.softmax(h @ h.transpose(-1, -2) / 3.0, dim=-1)
        return att @ h, torch.log_softmax(h, -1).argmax(-1)


class PositionalGPT(nn.Module):
    """A GPT-style embedding whose positions index `torch.arange(T)`: the positions are
    computed from the shape alone (an i64 `arange` read by a gather), once, by the compiler."""

    def __init__(self):
        super().__init__()
        self.tok = nn.Embedding(50, 16)
        self.pos = nn.Embedding(32, 16)
        self.lin = nn.Linear(16, 8)

    def forward(self, idx):
        return self.lin(self.tok(idx) + self.pos(torch.arange(idx.shape[1])))


class DiagPatterns(nn.Module):
    """`block_diag` and `diag_embed`: patterns of `full`, `arange` and comparisons built from
    the shapes, mixed with the input."""

    def forward(self, x):
        return torch.block_diag(x, torch.ones(2, 2)) * 2.0, torch.diag_embed(x) + 1.0


CASES = [
    ("positional_gpt", PositionalGPT, lambda: (torch.randint(0, 50, (2, 10)),)),
    ("diag_patterns", DiagPatterns, lambda: (torch.randn(3, 3),)),
    ("wide_mlp", WideMLP, lambda: (torch.randn(3, 20),)),
    ("strided_cnn", StridedCNN, lambda: (torch.randn(2, 2, 17, 15),)),
    ("norm_softmax", NormSoftmax, lambda: (torch.randint(0, 30, (2, 9)),)),
]


@pytest.mark.parametrize("name,cls,make_inputs", CASES, ids=[c[0] for c in CASES])
def test_user_exported_pt2_runs(tmp_path, name, cls, make_inputs):
    torch.manual_seed(7)
    model = cls().eval()
    if hasattr(model, "bn"):
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 2.0)
    inputs = make_inputs()
    ep = torch.export.export(model, inputs).run_decompositions()
    path = tmp_path / f"{name}.pt2"
    torch.export.save(ep, str(path))
    names = ep.graph_signature.user_inputs
    save_file({n: t.contiguous() for n, t in zip(names, inputs)}, str(tmp_path / "in.safetensors"))
    proc = subprocess.run(
        [fxhlo_bin(), "run", str(path), "--inputs", str(tmp_path / "in.safetensors"),
         "--out", str(tmp_path / "out.safetensors")],
        capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    got = load_file(str(tmp_path / "out.safetensors"))
    with torch.no_grad():
        want = model(*inputs)
    want = want if isinstance(want, tuple) else (want,)
    assert len(got) == len(want)
    for i, w in enumerate(want):
        g = got[f"output{i}"]
        assert g.dtype == w.dtype and g.shape == w.shape, (i, g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.is_floating_point:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        else:
            assert torch.equal(g, w), i


def test_native_module_reads_testdata():
    native = pytest.importorskip("fxhlo._native")
    text = native.inspect(os.path.join(REPO, "testdata", "mlp", "graph.json"))
    assert "aten.addmm.default" in text
    assert "aten.addmm.default" in native.supported_ops()
