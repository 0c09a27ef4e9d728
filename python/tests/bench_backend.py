"""First-call compile time and inference latency: eager vs Inductor vs fxhlo (torch.compile).

    python python/tests/bench_backend.py [--iters 20] [--repeat 3] [--models resnet18,gpt2]
                                         [--backends eager,inductor,fxhlo] [--small]

Models: torchvision resnet18 (random init, 1x3x224x224 unless --small: 2x3x64x64) and a
transformers GPT-2 from a small config (2 layers, 64 wide, random init, 2x16 tokens), in
inference (``torch.no_grad()``).

How the first call is made comparable: every (model, backend) pair is measured in a **fresh
Python process** (``--repeat`` processes per pair; medians are reported), so no backend
profits from imports, caches or worker pools that another backend's run left behind.  In that
process, after building the model and its eager reference output, the shared Dynamo machinery
is warmed up identically for every backend by compiling an unrelated tiny module
(Linear + LayerNorm + softmax) with ``backend="eager"`` (Dynamo only, no aot_autograd) and
``torch._dynamo.reset()``.  Then the timed "first call" is ``torch.compile(model, backend=...)``
plus the first call: Dynamo's capture, the backend (aot_autograd, decompositions, the
backend's imports and its compiler) and one run.  Disk caches are off for both: Inductor gets
an empty ``TORCHINDUCTOR_CACHE_DIR`` per process, fxhlo runs with ``options={"cache": False}``
(and an empty ``FXHLO_CACHE_DIR``).

Reported per backend: ``first_call_s``; ``dynamo_s`` and ``backend_s``, Dynamo's own split of
it (``torch._dynamo.utils.compilation_time_metrics``: everything Dynamo did outside the
backend, and the backend call); ``latency_ms`` (median of ``--iters`` calls after the first);
``max_abs_err`` against eager; for fxhlo also ``fxhlo_compiler_s`` (time in the Rust compiler,
``fxhlo.runner.STATS``) and the fallbacks.  ``first_call_ratio`` is Inductor's first call over
fxhlo's.  Prints one JSON object per model.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings


def _models(names, small):
    import torch
    out = {}
    if "resnet18" in names:
        import torchvision
        torch.manual_seed(0)
        m = torchvision.models.resnet18(weights=None).eval()
        x = torch.randn(2, 3, 64, 64) if small else torch.randn(1, 3, 224, 224)
        out["resnet18"] = (m, (x,), lambda mod, a: mod(*a))
    if "gpt2" in names:
        import transformers
        cfg = transformers.GPT2Config(n_layer=2, n_head=4, n_embd=64, vocab_size=256,
                                      n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0,
                                      attn_pdrop=0.0, use_cache=False)
        torch.manual_seed(0)
        m = transformers.GPT2LMHeadModel(cfg).eval()
        ids = torch.randint(0, 256, (2, 16))
        out["gpt2"] = (m, (ids,), lambda mod, a: mod(input_ids=a[0], use_cache=False).logits)
    return out


def _time(fn, iters):
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def _warm_dynamo():
    """Warms the machinery every backend shares (Dynamo's tracer, fake tensors, guards) with
    an unrelated tiny module, through Dynamo only."""
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(8, 8)
            self.norm = torch.nn.LayerNorm(8)

        def forward(self, x):
            return self.norm(torch.relu(self.lin(x))).softmax(-1)

    torch.compile(Tiny(), backend="eager")(torch.randn(2, 8))
    torch._dynamo.reset()


def _dynamo_split():
    """(seconds in Dynamo outside the backend, seconds in the backend) since the last reset."""
    try:
        from torch._dynamo.utils import compilation_time_metrics as m
        total = sum(m.get("_compile.compile_inner", []))
        backend = sum(m.get("OutputGraph.call_user_compiler", []))
        return total - backend, backend
    except Exception:  # noqa: BLE001 - private API; the split is informative only
        return None, None


def _child(model_name, be, iters, small):
    """Measures one backend on one model in this (fresh) process; returns a dict."""
    import torch
    warnings.simplefilter("ignore")
    model, inputs, call = _models([model_name], small)[model_name]
    res = {"input": [list(t.shape) for t in inputs], "threads": torch.get_num_threads()}
    with torch.no_grad():
        want = call(model, inputs)
        if be == "eager":
            m = model
        else:
            _warm_dynamo()
            try:
                from torch._dynamo.utils import compilation_time_metrics
                compilation_time_metrics.clear()
            except Exception:  # noqa: BLE001
                pass
            opts = {"cache": False} if be == "fxhlo" else None
            t0 = time.perf_counter()
            m = torch.compile(model, backend=be, options=opts)
            got = call(m, inputs)
            res["first_call_s"] = time.perf_counter() - t0
            res["dynamo_s"], res["backend_s"] = _dynamo_split()
            res["max_abs_err"] = float((got - want).abs().max())
            if be == "fxhlo":
                from fxhlo.runner import STATS
                res["fxhlo_compiler_s"] = STATS.compile_seconds
                res["fxhlo_graphs_compiled"] = STATS.graphs_compiled
                res["fxhlo_fallbacks"] = STATS.events
        res["latency_ms"] = 1e3 * _time(lambda: call(m, inputs), iters)
    return res


def _run_child(model_name, be, a):
    with tempfile.TemporaryDirectory(prefix="bench_backend_") as tmp:
        env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=os.path.join(tmp, "inductor"),
                   FXHLO_CACHE_DIR=os.path.join(tmp, "fxhlo"))
        cmd = [sys.executable, os.path.abspath(__file__), "--child", f"{model_name}:{be}",
               "--iters", str(a.iters)] + (["--small"] if a.small else [])
        p = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"bench_backend: {model_name} on {be} failed ({p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def _median(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeat", type=int, default=1,
                   help="fresh processes per (model, backend); medians are reported")
    p.add_argument("--models", default="resnet18,gpt2")
    p.add_argument("--small", action="store_true", help="resnet18 on 2x3x64x64")
    p.add_argument("--backends", default="eager,inductor,fxhlo")
    p.add_argument("--child", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.child:
        model_name, be = a.child.split(":")
        print(json.dumps(_child(model_name, be, a.iters, a.small)), flush=True)
        return
    for name in a.models.split(","):
        res = {"model": name}
        for be in a.backends.split(","):
            runs = [_run_child(name, be, a) for _ in range(a.repeat)]
            res.setdefault("input", runs[0]["input"])
            res.setdefault("threads", runs[0]["threads"])
            for k in ("first_call_s", "dynamo_s", "backend_s", "fxhlo_compiler_s",
                      "latency_ms"):
                if k in runs[0]:
                    key = k if k.startswith("fxhlo") else f"{be}_{k}"
                    res[key] = _median([r[k] for r in runs])
            if a.repeat > 1 and "first_call_s" in runs[0]:
                res[f"{be}_first_call_runs_s"] = [round(r["first_call_s"], 3) for r in runs]
            for k in ("max_abs_err", "fxhlo_graphs_compiled", "fxhlo_fallbacks"):
                if k in runs[0]:
                    res[k if k.startswith("fxhlo") else f"{be}_{k}"] = runs[0][k]
        if res.get("inductor_first_call_s") and res.get("fxhlo_first_call_s"):
            res["first_call_ratio"] = res["inductor_first_call_s"] / res["fxhlo_first_call_s"]
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
