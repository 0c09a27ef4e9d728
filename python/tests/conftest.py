"""Shared fixtures of the Python tests."""

import pytest


@pytest.fixture
def fresh_backend(tmp_path, monkeypatch):
    """Fresh Dynamo caches, zeroed backend counters and a private compile cache for one test
    (modules that compile through the backend use it for every test: ``pytestmark``)."""
    import torch

    from fxhlo.runner import STATS
    monkeypatch.setenv("FXHLO_CACHE_DIR", str(tmp_path / "cache"))
    torch._dynamo.reset()
    STATS.reset()
    yield
    torch._dynamo.reset()
