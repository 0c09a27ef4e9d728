"""Text generation through ``torch.compile`` (issues 37 and 38).

    python -m fxhlo.bench_generate [--model gpt2] [--tokens 32] [--cache dynamic]
    python -m fxhlo.bench_generate --model llama-0.5b --cache static --batch 1 --dtype bf16

A causal LM (a model of the zoo, with its reduced config, or ``llama-0.5b``: a Llama-style
decoder of 0.50B parameters, d 1536, 16 layers, 12 heads, 4 KV heads, MLP 4096, vocabulary
32000) with random weights generates greedily. Each peer (eager; Inductor, ``dynamic=True``
with the dynamic cache; fxhlo with symbolic shapes traced once, and with ``symbolic=False``,
traced again per shape) runs three rounds:

- ``first``: the first ``generate`` (every compile included);
- ``new lengths``: a prompt 5 tokens longer, so most cache lengths are new (with the
  ``DynamicCache`` each decoding step is a new shape);
- ``warm``: the same again (every shape seen).

Then, timed on warm peers, the decode rate: ``generate`` of ``tokens + 1`` tokens minus
``generate`` of 1 (the prefill), over ``tokens``, median of ``--rounds``; and the memory
roofline: the weights' bytes read once per token over the copy bandwidth measured in the same
run (a 256 MiB tensor copy, read + write bytes). Every peer's tokens are checked against eager's.
The machine is shared and noisy: peers run one after another, so compare ratios of one run.
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings
from typing import Any, Dict, List, Tuple

PEERS = ("eager", "inductor", "fxhlo", "fxhlo-per-shape")


def _model(name: str, dtype) -> Tuple[Any, Any]:
    """(model, prompt ids) for ``name``."""
    import torch
    if name == "llama-0.5b":
        import transformers as tf
        cfg = tf.LlamaConfig(hidden_size=1536, intermediate_size=4096, num_hidden_layers=16,
                             num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                             max_position_embeddings=512)
        torch.manual_seed(0)
        model = tf.LlamaForCausalLM(cfg).eval()
        ids = torch.randint(0, cfg.vocab_size, (1, 16))
    else:
        from . import zoo
        m = zoo.models()[name]
        model = m.build().m.eval()
        ids = m.inputs(0)[0]
    return model.to(dtype), ids


def _generate(model, ids, tokens: int, cache: str):
    kw = dict(max_new_tokens=tokens, min_new_tokens=tokens, do_sample=False, use_cache=True,
              pad_token_id=0, eos_token_id=None, disable_compile=True)
    if cache == "static":
        kw["cache_implementation"] = "static"
    return model.generate(ids, **kw)


def _run(name: str, args) -> Dict[str, Any]:
    import torch
    from torch._dynamo.utils import counters

    from .runner import STATS
    torch._dynamo.reset()
    STATS.reset()
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    model, ids = _model(args.model, dtype)
    ids = ids[: args.batch] if args.batch else ids
    longer = torch.cat([ids, ids[:, :5]], 1)
    frames0 = counters["stats"]["unique_graphs"]
    if name == "inductor":
        model.forward = torch.compile(model.forward, backend="inductor",
                                      dynamic=args.cache == "dynamic" or None)
    elif name.startswith("fxhlo"):
        opts = {"cache": False, "symbolic": name == "fxhlo"}
        model.forward = torch.compile(model.forward, backend="fxhlo", options=opts)
    rec: Dict[str, Any] = {"peer": name}
    outs: List[Any] = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for what, prompt in (("first", ids), ("new lengths", longer), ("warm", longer)):
            t = time.perf_counter()
            outs.append(_generate(model, prompt, args.tokens, args.cache))
            rec[what] = time.perf_counter() - t
        rates = []
        for _ in range(args.rounds):
            t = time.perf_counter()
            _generate(model, longer, 1, args.cache)
            t1 = time.perf_counter()
            _generate(model, longer, args.tokens + 1, args.cache)
            t2 = time.perf_counter()
            rates.append(args.tokens / max((t2 - t1) - (t1 - t), 1e-9))
            rec.setdefault("prefill", []).append(t1 - t)
    rec["decode_tps"] = statistics.median(rates)
    rec["prefill"] = statistics.median(rec["prefill"])
    rec["graphs"] = counters["stats"]["unique_graphs"] - frames0
    rec["outs"] = outs
    rec["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    if name.startswith("fxhlo"):
        rec["symbolic"] = STATS.symbolic_graphs
        rec["specializations"] = STATS.specializations
        rec["compiles"] = STATS.graphs_compiled
        rec["fallback_steps"] = sum(g.fallback_steps for g in STATS.graphs.values())
    return rec


def copy_bandwidth(mib: int = 256, rounds: int = 5) -> float:
    """Bytes per second of a ``mib`` MiB tensor copy (read + write), best of ``rounds``."""
    import torch
    src = torch.ones(mib << 18)
    dst = torch.empty_like(src)
    best = float("inf")
    for _ in range(rounds):
        t = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - t)
    return 2 * src.numel() * 4 / best


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", default="gpt2",
                   help="a causal LM of the zoo (gpt2, llama, qwen2, ...) or llama-0.5b")
    p.add_argument("--tokens", type=int, default=32)
    p.add_argument("--cache", choices=("dynamic", "static"), default="dynamic")
    p.add_argument("--dtype", choices=("f32", "bf16"), default="f32")
    p.add_argument("--batch", type=int, default=0, help="batch size (default: the model's)")
    p.add_argument("--rounds", type=int, default=3, help="decode-rate rounds per peer")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--peers", default=",".join(PEERS))
    args = p.parse_args(argv)
    import os

    import torch
    torch.set_num_threads(args.threads)
    os.environ.setdefault("FXHLO_NUM_THREADS", str(args.threads))
    unknown = set(args.peers.split(",")) - set(PEERS)
    if unknown:
        p.error(f"unknown peer(s) {sorted(unknown)}; known: {', '.join(PEERS)}")
    recs = [_run(name, args) for name in args.peers.split(",")]
    bw = copy_bandwidth()
    ref = next((r for r in recs if r["peer"] == "eager"), recs[0])["outs"]
    roof = bw / recs[0]["weight_bytes"]
    print(f"{args.model} {args.dtype}, {args.cache} cache, batch {ref[0].shape[0]}, "
          f"{args.tokens} greedy tokens, {args.threads} threads; "
          f"{recs[0]['weight_bytes'] / 2**20:.0f} MiB of weights, copy {bw / 1e9:.1f} GB/s: "
          f"roofline {roof:.1f} tokens/s")
    print("| peer | first s | new lengths s | warm s | prefill s | decode tokens/s "
          "(share of roofline) | Dynamo graphs | fxhlo traces / sizes bound / compiles "
          "/ interpreter steps | tokens = eager's |")
    print("|---|---|---|---|---|---|---|---|---|")
    ok = True
    for r in recs:
        same = all(torch.equal(a, b) for a, b in zip(r["outs"], ref))
        ok = ok and same
        fx = (f"{r['symbolic']} / {r['specializations']} / {r['compiles']} / "
              f"{r['fallback_steps']}" if "compiles" in r else "")
        print(f"| {r['peer']} | {r['first']:.2f} | {r['new lengths']:.2f} | {r['warm']:.2f} | "
              f"{r['prefill']:.3f} | {r['decode_tps']:.1f} ({r['decode_tps'] / roof:.0%}) | "
              f"{r['graphs']} | {fx} | {'yes' if same else 'NO'} |")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
