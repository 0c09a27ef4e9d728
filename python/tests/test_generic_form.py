"""``fxhlo lower --generic`` writes every stablehlo/chlo op in MLIR's generic syntax (the form an
MLIR without the StableHLO dialect can parse; see the Rust feature ``mlir``). Here jaxlib, which
has the dialects, checks that it is the same module as the pretty form: both parse and verify,
both print identically (``str(module)``), and the generic one runs in XLA to the expected outputs.

Covered: every testdata model, and the op-sweep cases (``test_ops_xla.py``) that reach the ops
with regions or dialect attributes (reduce, reduce_window, gather, scatter, sort, convolution,
dot_general, compare, rng, chlo, ...).

    PYTHONPATH=python python -m pytest python/tests/test_generic_form.py -q
"""

import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fxhlo.testing import xla  # noqa: E402
import test_ops_xla as sweep  # noqa: E402

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
MODELS = sorted(p.name for p in TESTDATA.iterdir() if (p / "graph.json").exists())

SWEEP_CASES = [
    "erf", "asin", "isnan", "gt.Tensor", "eq.Scalar", "where.self", "_to_copy", "arange",
    "rand", "randn", "randperm", "sum.dim_IntList", "argmax", "max.dim", "cumsum", "cat",
    "constant_pad_nd", "flip", "slice", "mm", "bmm", "convolution", "conv_transpose",
    "convolution_backward", "max_pool2d_with_indices", "avg_pool2d", "upsample_bilinear2d",
    "gather", "index_put", "scatter_add", "scatter_reduce", "sort", "topk",
]


@pytest.fixture(scope="module")
def runner():
    return xla.Runner()


def lower_both(folder, out_dir, inline_constants=False):
    """(pretty, generic) module text of a model, from ``fxhlo lower``."""
    texts = []
    for generic in (False, True):
        out = Path(out_dir) / f"model{'.generic' if generic else ''}.mlir"
        cmd = xla.fxhlo_command() + ["lower", str(folder), "-o", str(out)]
        cmd += ["--inline-constants"] * inline_constants + ["--generic"] * generic
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise xla.LowerFailed((r.stderr or r.stdout).strip())
        texts.append(out.read_text())
    return tuple(texts)


def check_same_module(pretty: str, generic: str):
    """Both forms parse and verify in jaxlib and print as the same module."""
    assert pretty != generic
    assert '"stablehlo.' in generic
    a, b = xla.verify(pretty), xla.verify(generic)
    assert str(a) == str(b), "the generic form prints differently from the pretty form"


@pytest.mark.parametrize("model", MODELS)
def test_model_generic_form(model, runner, tmp_path):
    folder = TESTDATA / model
    pretty, generic = lower_both(folder, tmp_path)
    check_same_module(pretty, generic)
    inputs, weights, expected, tol = xla.load_testdata(folder)
    outs = runner.run(generic, inputs + weights)
    assert len(outs) == len(expected)
    t = dict(xla.TOLERANCE)
    if tol:
        for k in ("float32", "float64"):
            t[k] = (max(tol["rtol"], t[k][0]), max(tol["atol"], t[k][1]))
    for i, (a, b) in enumerate(zip(outs, expected)):
        xla.assert_close(a, b, f"{model} output {i}", t)


def test_inline_constants_generic_form(tmp_path):
    pretty, generic = lower_both(TESTDATA / "mlp", tmp_path, inline_constants=True)
    assert '"stablehlo.constant"() <{value = dense<"0x' in generic
    check_same_module(pretty, generic)


@pytest.mark.parametrize("name", SWEEP_CASES)
def test_op_generic_form(name, runner, tmp_path):
    (c,) = [c for c in sweep.CASES if c.name == name]
    vs = sweep.variants(c)
    assert vs, f"{name}: eager accepts none of the dtypes"
    exact = c.check not in ("uniform", "normal", "perm", "dropout", "shape")
    model = sweep.Group(c.fn, [len(v[2]) for v in vs])
    ins = tuple(x for v in vs for x in v[2])
    folder = tmp_path / "graph"
    sweep.write_graph(model, ins, folder, exact, c.raw)
    pretty, generic = lower_both(folder, tmp_path, inline_constants=True)
    check_same_module(pretty, generic)
    outs = runner.run(generic, [xla.to_numpy(x) for x in ins])
    k = 0
    for label, _, vins, want in vs:
        got = outs[k:k + len(want)]
        k += len(want)
        sweep.check_outputs(c, got, want, vins, label)
        if c.check == "sort":
            sweep._check_sort(got, vins, c, label)
