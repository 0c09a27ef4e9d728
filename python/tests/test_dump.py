"""Tests for fxhlo.dump: the written folder follows docs/graph-format.md.

Run: PYTHONPATH=python python -m pytest python/tests -q
"""

import json
import math
import os

import pytest

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
from torch import nn  # noqa: E402

from fxhlo.dump import (  # noqa: E402
    ARG_KEYS, DTYPES_BY_NAME, DumpError, dump, run_fxjson, validate_fxjson,
)

load_file = safetensors_torch.load_file
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Tiny(nn.Module):
    """Linear + LayerNorm (3-result op) + buffer + lifted constant + max.dim (2 outputs)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(6, 5)
        self.ln = nn.LayerNorm(5)
        self.register_buffer("shift", torch.linspace(-1, 1, 5))

    def forward(self, x):
        y = self.ln(torch.relu(self.fc(x))) + self.shift + torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])
        v, i = y.max(dim=1)
        return v * 0.5, i


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(10, 4)
        self.head = nn.Linear(4, 10, bias=False)
        self.head.weight = self.emb.weight

    def forward(self, ids):
        return self.head(self.emb(ids))


class Odd(nn.Module):
    """inf/nan scalars, a None entry in a tensor list, split (Tensor[] result)."""

    def forward(self, x, i):
        a = x[:, i].masked_fill(x[:, i] > 0, float("-inf"))
        b, c = torch.split(x, [1, 2], dim=0)
        return a, b + 1, c.sum(dim=0)


class Mutating(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(1))

    def forward(self, x):
        self.count.add_(1)
        return x + self.count


def _load(d):
    with open(os.path.join(d, "graph.json")) as f:
        g = json.load(f)
    with open(os.path.join(d, "meta.json")) as f:
        meta = json.load(f)
    w = load_file(os.path.join(d, "weights.safetensors"))
    ins = load_file(os.path.join(d, "inputs.safetensors"))
    exp = load_file(os.path.join(d, "expected.safetensors"))
    return g, meta, w, ins, exp


def _check_spec(g):
    """Independent re-check of the spec rules (does not trust validate_fxjson)."""
    assert g["format"] == "fxhlo-graph"
    assert g["version"] == 1
    assert isinstance(g["producer"], dict)
    defined = {}
    for inp in g["inputs"]:
        assert inp["kind"] in ("user_input", "parameter", "buffer", "constant")
        assert ("target" in inp) == (inp["kind"] != "user_input")
        assert inp["type"]["dtype"] in DTYPES_BY_NAME
        assert inp["name"] not in defined
        defined[inp["name"]] = inp["type"]
    for node in g["nodes"]:
        assert set(node) == {"name", "op", "args", "results"}
        ns, name, overload = node["op"].split(".")
        assert ns == "aten"
        op = getattr(getattr(torch.ops.aten, name), overload)
        schema_names = {a.name for a in op._schema.arguments}
        assert set(node["args"]) <= schema_names, node["name"]
        for a in op._schema.arguments:
            if not a.has_default_value():
                assert a.name in node["args"], (node["name"], a.name)
        for v in node["args"].values():
            assert len(v) == 1 and next(iter(v)) in ARG_KEYS
            if "tensor" in v:
                assert v["tensor"] in defined, (node["name"], v)
            if "tensors" in v:
                assert all(t is None or t in defined for t in v["tensors"])
        for r in node["results"]:
            assert r["name"] not in defined
            assert r["type"]["dtype"] in DTYPES_BY_NAME
            assert all(isinstance(d, (int, str)) for d in r["type"]["shape"])
        for r in node["results"]:
            defined[r["name"]] = r["type"]
        assert not node["op"].startswith("operator")
    for o in g["outputs"]:
        assert o in defined
    return defined


def _meta_types_match(g, defined):
    """Result types match what torch computes on meta tensors (independent of the dumper)."""
    env = {}
    for inp in g["inputs"]:
        t = inp["type"]
        env[inp["name"]] = torch.empty(t["shape"], dtype=DTYPES_BY_NAME[t["dtype"]], device="meta")
    for node in g["nodes"]:
        _, name, overload = node["op"].split(".")
        op = getattr(getattr(torch.ops.aten, name), overload)
        kw = {}
        for k, v in node["args"].items():
            (tag, x), = v.items()
            if tag == "tensor":
                kw[k] = env[x]
            elif tag == "tensors":
                kw[k] = [None if n is None else env[n] for n in x]
            elif tag == "float":
                kw[k] = float(x)
            elif tag == "dtype":
                kw[k] = DTYPES_BY_NAME[x]
            elif tag in ("layout", "memory_format"):
                kw[k] = getattr(torch, x)
            elif tag == "device":
                kw[k] = torch.device("meta")
            elif tag == "none":
                kw[k] = None
            else:
                kw[k] = x
        out = op(**kw)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        assert len(outs) == len(node["results"]), node["name"]
        for r, t in zip(node["results"], outs):
            assert list(t.shape) == r["type"]["shape"], (node["name"], r)
            assert t.dtype == DTYPES_BY_NAME[r["type"]["dtype"]], (node["name"], r)
            env[r["name"]] = t


def test_tiny_model(tmp_path):
    torch.manual_seed(0)
    m = Tiny()
    x = torch.randn(3, 6)
    g = dump(m, (x,), tmp_path, name="tiny", seed=0)
    g2, meta, w, ins, exp = _load(tmp_path)
    assert g == g2
    assert not os.path.exists(tmp_path / "model.pt2")

    defined = _check_spec(g)
    _meta_types_match(g, defined)
    validate_fxjson(g, w)

    kinds = {i["kind"] for i in g["inputs"]}
    assert kinds == {"user_input", "parameter", "buffer", "constant"}
    assert g["weights"] == "weights.safetensors"
    for inp in g["inputs"]:
        if inp["kind"] != "user_input":
            t = w[inp["target"]]
            assert t.is_contiguous()
            assert list(t.shape) == inp["type"]["shape"]
        else:
            assert inp["name"] in ins
    assert {"fc.weight", "fc.bias", "ln.weight", "ln.bias", "shift"} <= set(w)

    # native_layer_norm has 3 results; getitem nodes are not emitted
    ln = [n for n in g["nodes"] if n["op"] == "aten.native_layer_norm.default"]
    assert len(ln) == 1 and len(ln[0]["results"]) == 3
    assert not any("getitem" in n["op"] for n in g["nodes"])
    # scalar in a Tensor slot: mul.Tensor(v, 0.5)
    assert any(n["op"] == "aten.mul.Tensor" and n["args"]["other"] == {"float": 0.5}
               for n in g["nodes"])

    assert meta["name"] == "tiny" and meta["seed"] == 0 and meta["outputs"] == 2
    assert meta["torch"] == torch.__version__
    assert meta["tolerance"] == {"rtol": 1e-4, "atol": 1e-5}
    assert set(exp) == {"output0", "output1"}
    assert exp["output1"].dtype == torch.int64
    with torch.no_grad():
        want = m(x)
    torch.testing.assert_close(exp["output0"], want[0])
    got = run_fxjson(g, w, ins)
    torch.testing.assert_close(got[0], exp["output0"], rtol=1e-4, atol=1e-5)
    assert torch.equal(got[1], exp["output1"])


def test_tied_and_pt2(tmp_path):
    torch.manual_seed(0)
    m = Tied()
    ids = torch.tensor([[1, 2, 3]])
    g = dump(m, (ids,), tmp_path, name="tied", save_pt2=True, tolerance={"rtol": 1e-3, "atol": 1e-3})
    _, meta, w, ins, exp = _load(tmp_path)
    _check_spec(g)
    params = [i for i in g["inputs"] if i["kind"] == "parameter"]
    assert len({p["target"] for p in params}) == 1
    assert len(w) == 1
    assert meta["tolerance"] == {"rtol": 1e-3, "atol": 1e-3}
    ep = torch.export.load(str(tmp_path / "model.pt2"))
    torch.testing.assert_close(ep.module()(ids), exp["output0"])


def test_special_floats_optional_tensors_lists(tmp_path):
    x = torch.randn(3, 4)
    i = torch.tensor([0, 2])
    g = dump(Odd(), (x, i), tmp_path, name="odd")
    _, _, w, ins, exp = _load(tmp_path)
    defined = _check_spec(g)
    _meta_types_match(g, defined)
    assert "weights" not in g and w == {}
    args = [v for n in g["nodes"] for v in n["args"].values()]
    assert {"tensors": [None, "i"]} in args
    assert {"float": "-inf"} in args
    split = [n for n in g["nodes"] if n["op"] == "aten.split_with_sizes.default"]
    assert len(split) == 1 and len(split[0]["results"]) == 2
    text = (tmp_path / "graph.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    out = run_fxjson(g, w, ins)
    for k, t in enumerate(out):
        torch.testing.assert_close(t, exp[f"output{k}"])
    assert math.isinf(exp["output0"].min().item()) or (x[:, i] <= 0).all()


def test_buffer_mutation_is_refused(tmp_path):
    with pytest.raises(DumpError, match="USER_OUTPUT|mutat"):
        dump(Mutating(), (torch.randn(2),), tmp_path / "m", name="m")


def test_validate_catches_bad_reference(tmp_path):
    g = dump(nn.Linear(3, 2), (torch.randn(1, 3),), tmp_path, name="lin")
    g["nodes"][-1]["args"]["self"] = {"tensor": "nope"}
    with pytest.raises(DumpError, match="nope"):
        validate_fxjson(g)


def test_registered_testdata_is_consistent():
    """The committed testdata/ folders (if generated) follow the spec."""
    root = os.path.join(REPO, "testdata")
    names = sorted(d for d in os.listdir(root) if os.path.isfile(os.path.join(root, d, "graph.json"))) \
        if os.path.isdir(root) else []
    if not names:
        pytest.skip("testdata/ not generated")
    for name in names:
        d = os.path.join(root, name)
        g, meta, w, ins, exp = _load(d)
        _check_spec(g)
        validate_fxjson(g, w)
        assert meta["outputs"] == len(g["outputs"]) == len(exp)
        users = [i["name"] for i in g["inputs"] if i["kind"] == "user_input"]
        assert set(users) == set(ins), name
        # run it with real CPU kernels (this also checks every recorded result type; the meta
        # kernels are not used here because some disagree with CPU, e.g. the unused saved_mean
        # of _native_batch_norm_legit_no_training is [0] on CPU and [C] on meta)
        with torch.no_grad():
            got = run_fxjson(g, w, ins)
        tol = meta["tolerance"]
        for k, t in enumerate(got):
            torch.testing.assert_close(t, exp[f"output{k}"], rtol=tol["rtol"], atol=tol["atol"],
                                       msg=lambda m: f"{name} output{k}: {m}")
