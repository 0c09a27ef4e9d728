"""The real-model benchmark's report (fxhlo.bench_models): ratios, geometric means, errors."""

from fxhlo import bench_models as bm

def _rec(model, fx, **peers):
    ps = {"fxhlo": {"ms": fx, "first_call_s": 1.5, "fxhlo_compile_ms": {"g0": 12.0},
                    "fallback_steps": 0}}
    for k, v in peers.items():
        ps[k] = {"ms": v} if isinstance(v, float) else {"error": v}
    return {"model": model, "batch": 1, "peers": ps}

def test_report_ratios_and_geometric_means(tmp_path):
    recs = [_rec("a", 10.0, eager=20.0, onnxruntime=5.0),
            _rec("b", 4.0, eager=2.0, onnxruntime="RuntimeError: no")]
    text = bm.report(recs, ["eager", "onnxruntime", "fxhlo"], "--models a,b")
    assert "| a | 1 | 10.00 | 20.00 (2.00) | 5.00 (0.50) |" in text
    assert "error: RuntimeError: no" in text
    # eager: sqrt(2.0 * 0.5) = 1; onnxruntime: only a's 0.5
    assert "eager 1.00 over 2" in text and "onnxruntime 0.50 over 1" in text
    header, sep = text.splitlines()[2:4]
    assert header.count("|") == sep.count("|")
    bm.chart(recs, ["eager", "onnxruntime", "fxhlo"], str(tmp_path / "r.png"))
    assert (tmp_path / "r.png").stat().st_size > 1000

def test_unknown_model_or_peer_is_an_error(capsys):
    import pytest
    with pytest.raises(SystemExit):
        bm.main(["--models", "nope"])
    with pytest.raises(SystemExit):
        bm.main(["--peers", "tvm"])
    assert "unknown" in capsys.readouterr().err
