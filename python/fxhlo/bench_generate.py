"""Text generation with a dynamic KV cache through ``torch.compile`` (issue 37).

    python -m fxhlo.bench_generate [--model gpt2] [--tokens 32] [--threads 2]

A Hugging Face causal LM from the model zoo (random weights, the zoo's reduced config) generates
greedily with its ``DynamicCache``: every decoding step has a new cache length, so each
step is a new shape. Each peer (eager; Inductor with ``dynamic=True``; fxhlo with symbolic
shapes traced once, and with ``symbolic=False``, traced again per shape) runs three rounds:

- ``first``: the first ``generate`` (every compile included);
- ``new lengths``: a prompt 5 tokens longer, so most cache lengths are new;
- ``warm``: the same again (every shape seen).

It prints seconds per round, ms per token, the number of Dynamo graphs, and fxhlo's symbolic
traces, specializations and compiles; every peer's tokens are checked against eager's.
"""

from __future__ import annotations

import argparse
import time
import warnings
from typing import Any, Dict, List


def _run(name: str, model_name: str, tokens: int) -> Dict[str, Any]:
    import torch
    from torch._dynamo.utils import counters

    from . import zoo
    from .runner import STATS
    torch._dynamo.reset()
    STATS.reset()
    m = zoo.models()[model_name]
    model = m.build().m.eval()
    ids = m.inputs(0)[0]
    longer = torch.cat([ids, ids[:, :5]], 1)
    kw = dict(max_new_tokens=tokens, do_sample=False, use_cache=True, pad_token_id=0,
              eos_token_id=None, disable_compile=True)
    frames0 = counters["stats"]["unique_graphs"]
    if name == "inductor":
        model.forward = torch.compile(model.forward, backend="inductor", dynamic=True)
    elif name.startswith("fxhlo"):
        opts = {"cache": False, "symbolic": name == "fxhlo"}
        model.forward = torch.compile(model.forward, backend="fxhlo", options=opts)
    rec: Dict[str, Any] = {"peer": name}
    outs: List[Any] = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for what, prompt in (("first", ids), ("new lengths", longer), ("warm", longer)):
            t = time.perf_counter()
            outs.append(model.generate(prompt, **kw))
            rec[what] = time.perf_counter() - t
    rec["graphs"] = counters["stats"]["unique_graphs"] - frames0
    rec["outs"] = outs
    if name.startswith("fxhlo"):
        rec["symbolic"] = STATS.symbolic_graphs
        rec["specializations"] = STATS.specializations
        rec["compiles"] = STATS.graphs_compiled
    return rec


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2", help="a causal LM of the zoo (gpt2, llama, ...)")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--peers", default="eager,inductor,fxhlo,fxhlo-per-shape")
    args = p.parse_args(argv)
    import os

    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("FXHLO_NUM_THREADS", str(args.threads))
    recs = [_run(name, args.model, args.tokens) for name in args.peers.split(",")]
    ref = next((r for r in recs if r["peer"] == "eager"), recs[0])["outs"]
    print(f"{args.model}, {args.tokens} greedy tokens with the DynamicCache, "
          f"{args.threads} threads; seconds per generate call (ms per token)")
    print("| peer | first | new lengths | warm | Dynamo graphs | fxhlo traces / sizes bound / "
          "compiles | tokens = eager's |")
    print("|---|---|---|---|---|---|---|")
    for r in recs:
        same = all(torch.equal(a, b) for a, b in zip(r["outs"], ref))
        cells = [f"{r[w]:.2f} ({r[w] / args.tokens * 1e3:.1f})"
                 for w in ("first", "new lengths", "warm")]
        fx = (f"{r['symbolic']} / {r['specializations']} / {r['compiles']}"
              if "compiles" in r else "")
        print(f"| {r['peer']} | {' | '.join(cells)} | {r['graphs']} | {fx} | "
              f"{'yes' if same else 'NO'} |")
    return 0 if all(all(torch.equal(a, b) for a, b in zip(r["outs"], ref)) for r in recs) else 1


if __name__ == "__main__":
    raise SystemExit(main())
