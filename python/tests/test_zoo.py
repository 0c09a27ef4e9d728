"""The model zoo (python/fxhlo/zoo.py, docs/zoo.md) against its expected-failure list
(python/fxhlo/zoo_xfail.py): every model x path either passes or is listed, and no listed one
passes (the list only shrinks).

CI runs ``fxhlo.zoo.ci_tasks()`` (every model on its cheap paths, the expensive paths on a
stated subset; docs/zoo.md says which and how long it takes) in a pool of 2 worker processes;
``FXHLO_ZOO=all`` runs every model x path, ``FXHLO_ZOO=gpt2,resnet50`` those models.

Run from python/tests with FXHLO_BIN set (see test_backend.py).
"""

import os

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("torchvision")
pytest.importorskip("fxhlo._native")

from fxhlo import zoo  # noqa: E402
from fxhlo.zoo_xfail import MACHINE_DEPENDENT, XFAIL  # noqa: E402


def _tasks():
    sel = os.environ.get("FXHLO_ZOO", "")
    if sel == "all":
        return zoo.all_tasks()
    if sel:
        return zoo.all_tasks(sel.split(","))
    return zoo.ci_tasks()


def test_xfail_list_names_real_tasks():
    """Every listed (model, path) exists and its reason is a sentence."""
    known = set(zoo.all_tasks())
    assert not set(XFAIL) & set(MACHINE_DEPENDENT)
    for key, why in {**XFAIL, **MACHINE_DEPENDENT}.items():
        assert key in known, key
        assert isinstance(why, str) and len(why) > 10, key


def test_zoo():
    tasks = _tasks()
    jobs = int(os.environ.get("FXHLO_ZOO_JOBS", "2"))
    results = zoo.run_pool(tasks, jobs=jobs, timeout=float(os.environ.get("FXHLO_ZOO_TIMEOUT",
                                                                            "240")))
    assert len(results) == len(tasks)
    unexpected = [f"{r['model']}/{r['path']}: {zoo.verdict(r)} ({r['status']}: "
                  f"{r.get('detail', '')})" for r in results
                  if zoo.verdict(r) in ("FAIL", "XPASS")]
    assert not unexpected, "\n".join(unexpected)
    # the paths that ran recorded their steps (the table's fallback columns)
    for r in results:
        if r["status"] == "pass" and r["path"] != "export":
            assert r.get("graphs", 0) >= 1 and r.get("steps", 0) >= 1, r
