"""Every testdata model, lowered by ``fxhlo lower`` (weights as arguments, and inlined as
constants), parsed and verified by jaxlib's StableHLO bindings, executed by XLA on CPU and
compared with the eager outputs stored beside it (tolerance from its meta.json, at least the
per-dtype tolerance of ``fxhlo.testing.xla``).

    PYTHONPATH=python python -m pytest python/tests/test_models_xla.py -q
"""

from pathlib import Path

import pytest

from fxhlo.testing import xla  # noqa: E402

TESTDATA = Path(__file__).resolve().parents[2] / "testdata"
MODELS = sorted(p.name for p in TESTDATA.iterdir() if (p / "graph.json").exists())


@pytest.fixture(scope="module")
def runner():
    return xla.Runner()


@pytest.mark.parametrize("inline", [False, True], ids=["weights-as-args", "inline-constants"])
@pytest.mark.parametrize("model", MODELS)
def test_model_matches_eager(model, inline, runner):
    xla.check_testdata(TESTDATA / model, runner, inline_constants=inline)


def test_emission_is_deterministic():
    a = xla.lower(TESTDATA / "gpt2")
    b = xla.lower(TESTDATA / "gpt2")
    assert a == b
