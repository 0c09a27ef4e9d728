"""First-call compile time and inference latency: eager vs Inductor vs fxhlo (torch.compile).

    python python/tests/bench_backend.py [--iters 20] [--models resnet18,gpt2]

Models: torchvision resnet18 (random init, 1x3x224x224 unless --small: 2x3x64x64) and a
transformers GPT-2 from a small config (2 layers, 64 wide, random init, 2x16 tokens).  Each
backend starts from ``torch._dynamo.reset()``; "first call" is the wall time of the first call
(Dynamo + aot_autograd + the backend's compile + one run); "compile" for fxhlo is the time spent
in the fxhlo compiler itself (fxhlo.runner.STATS).  The fxhlo disk cache is off.  Prints one
JSON object per model.
"""

import argparse
import copy
import json
import statistics
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


def main():
    import torch
    from fxhlo.runner import STATS

    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--models", default="resnet18,gpt2")
    p.add_argument("--small", action="store_true", help="resnet18 on 2x3x64x64")
    p.add_argument("--backends", default="eager,inductor,fxhlo")
    a = p.parse_args()
    warnings.simplefilter("ignore")
    for name, (model, inputs, call) in _models(a.models.split(","), a.small).items():
        res = {"model": name, "input": [list(t.shape) for t in inputs],
               "threads": torch.get_num_threads()}
        with torch.no_grad():
            want = call(model, inputs)
            for be in a.backends.split(","):
                torch._dynamo.reset()
                STATS.reset()
                if be == "eager":
                    m = model
                    first = None
                else:
                    opts = {"cache": False} if be == "fxhlo" else None
                    m = torch.compile(copy.deepcopy(model), backend=be, options=opts)
                    t0 = time.perf_counter()
                    got = call(m, inputs)
                    first = time.perf_counter() - t0
                    res[f"{be}_max_abs_err"] = float((got - want).abs().max())
                res[f"{be}_first_call_s"] = first
                if be == "fxhlo":
                    res["fxhlo_compiler_s"] = STATS.compile_seconds
                    res["fxhlo_graphs_compiled"] = STATS.graphs_compiled
                    res["fxhlo_fallbacks"] = STATS.events
                res[f"{be}_latency_ms"] = 1e3 * _time(lambda: call(m, inputs), a.iters)
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()
