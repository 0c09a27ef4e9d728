"""Tests for the benchmark harness (python -m fxhlo.bench): the table's structure, the work
counts, and that a failing peer shows up as an error cell instead of ending the run.  Timings
are never checked.

    PYTHONPATH=python python -m pytest python/tests/test_bench.py -q

The end-to-end runs use ``--quick`` (tiny shapes, 1 timed call).  fxhlo's cells hold numbers
when a release ``fxhlo`` binary is found (``FXHLO_BIN``, ``target/release/fxhlo``, PATH), else
``error: ...``; both are valid structure.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
from fxhlo import bench  # noqa: E402

# The folder holding the fxhlo package these tests imported (installed, or a checkout on the
# path): the benchmark's subprocess runs that same package.
PKGROOT = Path(bench.__file__).resolve().parents[1]

NCOLS = len(bench.COLUMNS)


def run_bench(tmp_path, *args, env=None):
    out = tmp_path / "bench.md"
    js = tmp_path / "bench.json"
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([str(PKGROOT)] + ([e["PYTHONPATH"]] if e.get("PYTHONPATH")
                                                       else []))
    e.update(env or {})
    cmd = [sys.executable, "-m", "fxhlo.bench", "--quick", "--iters", "1", "--warmup", "1",
           "--threads", "1", "--out", str(out), "--json", str(js), *args]
    r = subprocess.run(cmd, capture_output=True, text=True, env=e, cwd=tmp_path, timeout=1800)
    assert r.returncode == 0, r.stderr[-3000:]
    md = out.read_text()
    assert md == r.stdout
    return md, json.loads(js.read_text())


def table_of(md):
    lines = [l for l in md.splitlines() if l.startswith("|")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert set(lines[1].replace("|", "")) == {"-"}
    rows = [[c.strip() for c in l.strip("|").split("|")] for l in lines[2:]]
    return header, rows


def is_number(cell):
    try:
        float(cell.split()[0])
        return True
    except (ValueError, IndexError):
        return False


def check_row(row, data, peers):
    """A row's cells are numbers, 'error: ...' or '-' (peer not run), consistent with JSON."""
    assert len(row) == NCOLS
    cells = dict(zip(bench.COLUMNS, row))
    for peer, col in (("eager", "eager ms"), ("inductor", "inductor ms"), ("xla", "XLA ms"),
                      ("fxhlo", "fxhlo ms")):
        c = cells[col]
        p = data["peers"].get(peer)
        if peer not in peers:
            assert c == "-" and p is None
        elif "error" in p:
            assert c.startswith("error: ") and len(c) > len("error: ")
        else:
            assert is_number(c), (col, c)
            assert p["run_ms_median"] > 0 and p["iters"] >= 1
    for peer, col in (("eager", "eager/fxhlo"), ("inductor", "inductor/fxhlo"),
                      ("xla", "XLA/fxhlo")):
        ok = is_number(cells[col])
        assert ok == (data["derived"][f"{peer}/fxhlo"] is not None)
    assert len(cells["compile ms inductor / XLA / fxhlo"].split(" / ")) == 3
    fx = data["peers"].get("fxhlo")
    if fx and "error" not in fx:
        assert cells["check"] in ("ok", "MISMATCH") or cells["check"].startswith("error: ")
        steps, fallbacks = cells["fxhlo steps (fallbacks)"].split()
        assert int(steps) == fx["steps"] and fallbacks == f"({fx['fallbacks']})"
        unit = "GB/s" if data["metric"] == "bytes" else "GFLOP/s"
        assert unit in cells["fxhlo GB/s or GFLOP/s (% of peak)"]


# ------------------------------------------------------------------------------- unit

def test_select():
    assert bench.select(None) == list(bench.KEYS)
    assert bench.select("a,c") == ["a", "c"]
    assert bench.select("f") == ["f-resnet18", "f-gpt2"]
    assert bench.select("gpt2,a,a") == ["f-gpt2", "a"]
    with pytest.raises(SystemExit):
        bench.select("z")


@pytest.mark.parametrize("key", ["a", "b", "e"])
def test_flop_formulas_match_flop_counter(key):
    """The analytic FLOP counts of the matmul/conv workloads agree with torch's counter."""
    from torch.utils.flop_counter import FlopCounterMode
    w = next(w for w in bench.workloads(quick=True) if w.key == key)
    model, inputs = w.build()
    fc = FlopCounterMode(display=False)
    with fc:   # grad enabled: the encoder's slow path, whose matmuls the counter sees
        model(*inputs)
    assert fc.get_total_flops() == pytest.approx(w.work, rel=1e-9)


def test_full_shapes_are_the_issue_shapes():
    ws = {w.key: w for w in bench.workloads(quick=False)}
    assert ws["a"].work == 2 * 256 * (1024 * 4096 + 4096 * 4096 + 4096 * 1024)
    assert ws["c"].work == 4 * (2 * 4096 * 4096 + 2 * 4096)
    assert ws["d"].work == 4 * (2 * 8192 * 1024 + 2 * 1024)
    assert ws["e"].work == 2 * 8 * 128 * 128 * 9 * (3 * 32 + 32 * 32 + 32 * 32)
    assert [w.key for w in ws.values()] == list(bench.KEYS)


def test_table_from_records():
    peaks = {"copy_gbs": 10.0, "sgemm_gflops": 100.0}
    recs = [
        {"key": "a", "title": "a mlp", "metric": "flops", "work": 2e9, "peers": {
            "eager": {"run_ms_median": 40.0}, "inductor": {"run_ms_median": 30.0,
                                                          "compile_ms": 5000.0},
            "xla": {"error": "XLA worker: boom | bad"},
            "fxhlo": {"run_ms_median": 20.0, "compile_ms": 12.5, "steps": 4, "fallbacks": 1,
                      "check": "ok"}}},
        {"key": "c", "title": "c chain", "metric": "bytes", "work": 1e8, "peers": {
            "eager": {"run_ms_median": 20.0}, "fxhlo": {"error": "fxhlo bench: error: x"}}},
    ]
    for r in recs:
        bench.derive(r)
    assert recs[0]["derived"]["inductor/fxhlo"] == pytest.approx(1.5)
    assert recs[0]["derived"]["fxhlo_rate"] == pytest.approx(100.0)   # 2 GFLOP in 20 ms
    header, rows = table_of(bench.markdown_table(recs, peaks))
    assert header == bench.COLUMNS
    a, c = rows
    assert len(a) == len(c) == NCOLS
    assert a[1:5] == ["40.0", "30.0", "error: XLA worker: boom / bad", "20.0"]
    assert a[5:8] == ["1.50", "2.00", "-"]
    assert a[8] == "100 GFLOP/s (100%)"
    assert a[9] == "5000 / err / 12.5"
    assert a[10:] == ["4 (1)", "ok"]
    assert c[4].startswith("error: ") and c[5:8] == ["-", "-", "-"]
    assert c[11].startswith("error: ")
    t = bench.targets(recs, peaks)
    assert any(l.startswith("- faster than Inductor") and "met: a" in l for l in t)


def test_ratio_chart(tmp_path):
    recs = [{"key": "a", "derived": {"eager/fxhlo": 2.0, "inductor/fxhlo": 0.5,
                                     "xla/fxhlo": None}},
            {"key": "b", "derived": {"eager/fxhlo": 1.0}}]
    bench.ratio_chart(recs, str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_in_cache_ceiling_is_reported_against_the_copy_peak():
    """An in-cache run's rate, times the threads, is the ceiling a bandwidth workload's
    row of the targets and the notes give as a share of the copy peak."""
    peaks = {"copy_gbs": 50.0, "sgemm_gflops": 100.0}
    rec = {"key": "c", "title": "c chain", "metric": "bytes", "work": 1e8, "peers": {
        "fxhlo": {"run_ms_median": 10.0, "compile_ms": 1.0, "steps": 1, "fallbacks": 0,
                  "check": "ok"}},
        "in_cache": {"shape": "32x4096", "bytes": 1e6, "threads": 1, "run_ms_median": 0.1,
                     "iters": 200, "rounds": 4, "gbs_one_thread": 10.0,
                     "scaled_to_threads": 2, "gbs": 20.0}}
    bench.derive(rec)   # 10 GB/s: 20% of the peak, target not met
    assert bench.ceiling_of_peak(rec, peaks) == pytest.approx(0.4)
    (line,) = [l for l in bench.targets([rec], peaks) if l.startswith("- >= 70%")]
    assert "NOT met: c" in line and "in-cache ceilings, % of the copy peak: c 40%" in line
    (note,) = bench.ceiling_lines([rec], peaks)
    assert note.startswith("- c: arithmetic ceiling: the same program on 32x4096")
    assert "10.0 GB/s on one thread" in note and "20.0 GB/s, 40% of the copy peak" in note
    # a met target names no ceiling; a failed in-cache run is an error line
    rec["derived"]["fxhlo_rate"] = 40.0
    (line,) = [l for l in bench.targets([rec], peaks) if l.startswith("- >= 70%")]
    assert "met: c" in line and "ceiling" not in line
    rec["in_cache"] = {"shape": "32x4096", "error": "fxhlo bench: boom"}
    assert bench.ceiling_of_peak(rec, peaks) is None
    assert bench.ceiling_lines([rec], peaks) == [
        "- c: in-cache run (32x4096): error: fxhlo bench: boom"]


# ------------------------------------------------------------------------------- end to end

def test_quick_one_workload_all_peers(tmp_path):
    md, js = run_bench(tmp_path, "--only", "c")
    header, rows = table_of(md)
    assert header == bench.COLUMNS
    assert len(rows) == 1 and rows[0][0].startswith("c ")
    assert [w["key"] for w in js["workloads"]] == ["c"]
    check_row(rows[0], js["workloads"][0], bench.PEERS)
    eager = js["workloads"][0]["peers"]["eager"]
    assert "error" not in eager, eager
    ind = js["workloads"][0]["peers"]["inductor"]
    if "error" not in ind:
        assert ind["first_call_ms"] > 0 and "compile_ms" in ind
    assert js["threads"] == 1
    assert "PJRT_NPROC=1" in js["thread_settings"]
    for k in ("copy_gbs", "sgemm_gflops"):
        assert js["peaks"][k] and js["peaks"][k] > 0
    assert {"torch", "numpy", "fxhlo"} <= set(js["versions"])
    for line in ("- machine peaks", "- threads: 1", "- versions:", "- command:"):
        assert line in md
    # the chart of the ratios, beside the markdown
    assert (tmp_path / "bench.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    fx = js["workloads"][0]["peers"]["fxhlo"]
    if "error" not in fx:
        # the in-cache run of the same model, 16 rows in --quick
        c = js["workloads"][0]["in_cache"]
        assert c["shape"] == "16x256" and c["gbs"] > 0 and c["steps"] == fx["steps"]
        assert c["bytes"] == bench.chain_bytes(16, 256)
        assert "- c: arithmetic ceiling: the same program on 16x256 (in cache)" in md


def test_quick_every_workload(tmp_path):
    peers = ("eager", "xla", "fxhlo")
    md, js = run_bench(tmp_path, "--peers", ",".join(peers), "--skip-peaks")
    header, rows = table_of(md)
    assert len(rows) == len(bench.KEYS)
    assert [w["key"] for w in js["workloads"]] == list(bench.KEYS)
    for row, data in zip(rows, js["workloads"]):
        check_row(row, data, peers)
        assert "error" not in data["peers"]["eager"], data["peers"]["eager"]
        assert data["work"] and data["work"] > 0


def test_failing_peer_is_a_cell_not_a_crash(tmp_path):
    md, js = run_bench(tmp_path, "--only", "d", "--peers", "eager,xla,fxhlo", "--skip-peaks",
                       env={"FXHLO_BIN": str(tmp_path / "no-such-fxhlo")})
    header, rows = table_of(md)
    (row,) = rows
    check_row(row, js["workloads"][0], ("eager", "xla", "fxhlo"))
    cells = dict(zip(bench.COLUMNS, row))
    assert is_number(cells["eager ms"])
    assert cells["XLA ms"].startswith("error: ")
    assert cells["fxhlo ms"].startswith("error: ")
    assert cells["check"].startswith("error: ")
