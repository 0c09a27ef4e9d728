"""Real models through the user path: ``torch.compile(model, backend=B)`` for every peer.

    cd python && python -m fxhlo.bench_models                       # every model, batch 1
    python -m fxhlo.bench_models --models resnet50,bert --batches 1,8 --rounds 7 \\
        --out docs/bench-models.md --json /tmp/bm.json --png docs/bench-models.png

Peers (inference, f32, ``torch.no_grad()``, the same thread count for all):

* ``eager``: the model as it is;
* ``inductor`` and ``inductor-freezing``: ``torch.compile(backend="inductor")``, the second
  with ``torch._inductor.config.freezing = True`` (parameters as constants, as fxhlo does);
* ``openvino``: ``openvino.convert_model`` + ``compile_model`` on the CPU device, asked for
  f32 (``INFERENCE_PRECISION_HINT``: by default it computes f32 models in bf16 on CPUs with
  ``avx512_bf16``) and the same thread count.  Its ``torch.compile`` backend
  (``backend="openvino"``) fails on every model with torch 2.15 (a Dynamo guard error), so
  its own PyTorch frontend stands in;
* ``onnxruntime``: ``torch.onnx.export`` then an ``InferenceSession`` on the CPU execution
  provider with the same intra-op thread count;
* ``fxhlo``: ``torch.compile(backend="fxhlo")`` with its defaults (freezing on).

Each peer runs in its own worker process beside eager, so that no peer's settings or
caches reach another (Inductor's ``freezing`` flag changes how Dynamo captures parameters;
Dynamo caches compiled code per forward).  There the peer is prepared (its "first call":
compile or export plus one call, timed, after Dynamo was warmed up on a tiny module) and
checked against eager; then the timed calls come in rounds in which the peer and eager take
turns.  Eager's column is the median over all those processes.  Peers are not interleaved
with each other: run on a quiet machine.  Reported: the median latency per peer,
the ratio peer ms / fxhlo ms (> 1: fxhlo faster), the geometric mean of the ratios per peer,
each peer's first-call time and fxhlo's own compile time per graph (``fxhlo.stats()``).  A peer
that fails reads ``error: <reason>`` and the run goes on.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Dict, List, Optional, Tuple

from .bench import time_calls

PEERS = ("eager", "inductor", "inductor-freezing", "openvino", "onnxruntime", "fxhlo")

# name -> (what it is, at which size)
MODELS = {
    "gpt2": "GPT-2 124M (transformers GPT2LMHeadModel, random init), 128 tokens, logits",
    "bert": "BERT-base (transformers BertModel, random init), 128 tokens, last hidden state",
    "llama": "Llama-style decoder (transformers LlamaModel: 2 layers, d 1024, 16 heads, "
             "ff 2816), 128 tokens",
    "resnet50": "torchvision resnet50, 224x224",
    "mobilenet_v3_small": "torchvision mobilenet_v3_small, 224x224",
    "efficientnet_b0": "torchvision efficientnet_b0, 224x224",
    "convnext_tiny": "torchvision convnext_tiny, 224x224",
    "vit_b_16": "torchvision vit_b_16, 224x224",
    "whisper_tiny_encoder": "transformers WhisperEncoder at whisper-tiny's size (4 layers, "
                            "d 384), 80x3000 log-mel frames",
    "swin_t": "torchvision swin_t, 224x224",
}


def build(name: str, batch: int):
    """The model (eval mode, random init, seeded) and its example inputs (a tuple)."""
    import torch
    torch.manual_seed(0)
    if name in ("gpt2", "bert", "llama"):
        import transformers as tf
        ids = torch.randint(0, 1000, (batch, 128))
        if name == "gpt2":
            m = tf.GPT2LMHeadModel(tf.GPT2Config())
        elif name == "bert":
            m = tf.BertModel(tf.BertConfig())
        else:
            m = tf.LlamaModel(tf.LlamaConfig(hidden_size=1024, intermediate_size=2816,
                                             num_hidden_layers=2, num_attention_heads=16,
                                             num_key_value_heads=16, vocab_size=32000))
        return _FirstTensor(m.eval()), (ids,)
    if name == "whisper_tiny_encoder":
        import transformers as tf
        cfg = tf.WhisperConfig(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                               encoder_ffn_dim=1536, num_mel_bins=80)
        m = tf.WhisperModel(cfg).get_encoder()
        return _FirstTensor(m.eval()), (torch.randn(batch, 80, 3000),)
    import torchvision
    m = getattr(torchvision.models, name)(weights=None)
    return m.eval(), (torch.randn(batch, 3, 224, 224),)


class _FirstTensor:
    """Wraps a transformers model so that it takes and returns tensors only (for ONNX export
    and a like-for-like comparison): ``forward(ids) -> logits or last hidden state``."""

    def __new__(cls, inner):
        import torch

        class FirstTensor(torch.nn.Module):
            def __init__(self, inner):
                super().__init__()
                self.inner = inner

            def forward(self, x):
                return self.inner(x, return_dict=False)[0]
        return FirstTensor(inner)


def _median_ms(fn: Callable[[], Any], n: int) -> float:
    return statistics.median(time_calls(fn, n, warmup=0))


def _prepare(peer: str, model, inputs, threads: int, tmp: str) -> Callable[[], Any]:
    """A callable running ``model(*inputs)`` through ``peer`` (compiled lazily at first call)."""
    import torch
    if peer == "eager":
        return lambda: model(*inputs)
    if peer in ("inductor", "inductor-freezing"):
        import torch._inductor.config as icfg
        icfg.freezing = peer == "inductor-freezing"
        c = torch.compile(model, backend="inductor")
        return lambda: c(*inputs)
    if peer == "openvino":
        # OpenVINO's torch.compile backend (openvino.torch) fails on every model with torch
        # 2.15 ("Guard failed on the same frame it was created ... name 'input1' is not
        # defined", with and without inlined nn modules); its own PyTorch frontend is used
        import openvino as ov
        cm = ov.convert_model(model, example_input=inputs[0] if len(inputs) == 1 else inputs)
        c = ov.compile_model(cm, "CPU", {"INFERENCE_PRECISION_HINT": "f32",
                                         "INFERENCE_NUM_THREADS": str(threads)})
        arrays = [x.numpy() for x in inputs]
        return lambda: torch.from_numpy(c(arrays)[0])
    if peer == "onnxruntime":
        import onnxruntime as ort
        path = os.path.join(tmp, "model.onnx")
        torch.onnx.export(model, inputs, path, dynamo=True, external_data=True)
        so = ort.SessionOptions()
        so.intra_op_num_threads = threads
        so.inter_op_num_threads = 1
        sess = ort.InferenceSession(path, so, providers=["CPUExecutionProvider"])
        names = [i.name for i in sess.get_inputs()]
        feed = {n: x.numpy() for n, x in zip(names, inputs)}
        return lambda: torch.from_numpy(sess.run(None, feed)[0])
    if peer == "fxhlo":
        import fxhlo.backend  # noqa: F401
        c = torch.compile(model, backend="fxhlo", options={"threads": threads, "cache": False})
        return lambda: c(*inputs)
    raise ValueError(peer)


def run_model(name: str, batch: int, peers: List[str], threads: int, rounds: int,
              calls: int) -> Dict[str, Any]:
    """Worker: prepares every peer, checks it against eager, times interleaved rounds."""
    import torch
    torch.set_num_threads(threads)
    import fxhlo
    from fxhlo.runner import STATS
    model, inputs = build(name, batch)
    rec: Dict[str, Any] = {"model": name, "batch": batch, "peers": {}}
    with torch.no_grad():
        want = model(*inputs)
        # warm Dynamo up once for every peer alike
        tiny = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8))
        torch.compile(tiny, backend="eager")(torch.randn(2, 8))
        torch._dynamo.reset()
        fns: Dict[str, Callable[[], Any]] = {}
        with tempfile.TemporaryDirectory() as tmp:
            for p in peers:
                info: Dict[str, Any] = {}
                rec["peers"][p] = info
                try:
                    STATS.reset()
                    t0 = time.perf_counter()
                    fn = _prepare(p, model, inputs, threads, tmp)
                    got = fn()
                    info["first_call_s"] = time.perf_counter() - t0
                    info["max_abs_err"] = float((got.float() - want.float()).abs().max())
                    scale = float(want.abs().max()) or 1.0
                    if not info["max_abs_err"] <= 1e-3 * scale + 1e-4:
                        info["mismatch"] = True
                    if p == "fxhlo":
                        st = fxhlo.stats()
                        info["fxhlo_compile_ms"] = {k: round(g["compile_ms"], 1)
                                                    for k, g in st["graphs"].items()}
                        info["compile_s_total"] = st.get("compile_seconds")
                        info["fallback_steps"] = sum(g["fallback_steps"]
                                                     for g in st["graphs"].values())
                        info["eager_partitions"] = sum(g["eager_partitions"]
                                                       for g in st["graphs"].values())
                        info["graphs"] = len(st["graphs"])
                    fns[p] = fn
                except Exception as e:  # noqa: BLE001 - a failing peer is reported
                    msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
                    info["error"] = msg[:160]
            names = list(fns)
            times: Dict[str, List[float]] = {p: [] for p in names}
            for r in range(rounds):
                order = names[r % len(names):] + names[:r % len(names)] if names else []
                for p in order:
                    fns[p]()  # warm
                    times[p].append(_median_ms(fns[p], calls))
            for p in names:
                rec["peers"][p]["ms"] = statistics.median(times[p])
    return rec


def _worker_cmd(name, batch, peers, threads, rounds, calls) -> List[str]:
    return [sys.executable, "-m", "fxhlo.bench_models", "--worker", name, "--batches",
            str(batch), "--peers", ",".join(peers), "--threads", str(threads), "--rounds",
            str(rounds), "--calls", str(calls)]


def _env(threads: int) -> Dict[str, str]:
    env = dict(os.environ)
    for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS",
              "FXHLO_NUM_THREADS"):
        env[k] = str(threads)
    return env


def report(records: List[Dict[str, Any]], peers: List[str], argv: str) -> str:
    """The markdown table: ms per peer, ratios to fxhlo, geometric means, first calls."""
    others = [p for p in peers if p != "fxhlo"]
    lines = [f"Command: `python -m fxhlo.bench_models {argv}`", "",
             "| model | batch | fxhlo ms | " + " | ".join(f"{p} ms (ratio)" for p in others)
             + " | fxhlo first call s | fxhlo compile ms per graph | fallback steps |",
             "|---" * (6 + len(others)) + "|"]
    ratios: Dict[str, List[float]] = {p: [] for p in others}
    for rec in records:
        ps = rec.get("peers", {})
        fx = ps.get("fxhlo", {})
        fx_ms = fx.get("ms")
        cells = []
        for p in others:
            info = ps.get(p, {})
            if "ms" in info and fx_ms:
                r = info["ms"] / fx_ms
                ratios[p].append(r)
                cells.append(f"{info['ms']:.2f} ({r:.2f})" + (" mismatch" if info.get("mismatch") else ""))
            else:
                cells.append(f"error: {info.get('error', rec.get('error', 'not run'))}"[:70])
        fx_cell = f"{fx_ms:.2f}" if fx_ms else f"error: {fx.get('error', rec.get('error', ''))}"[:70]
        if fx.get("mismatch"):
            fx_cell += f" mismatch ({fx.get('max_abs_err'):.2g})"
        comp = fx.get("fxhlo_compile_ms", {})
        lines.append(f"| {rec['model']} | {rec['batch']} | {fx_cell} | " + " | ".join(cells)
                     + f" | {fx.get('first_call_s', float('nan')):.1f} | "
                     + (", ".join(f"{v:.0f}" for v in comp.values()) or "-")
                     + f" | {fx.get('fallback_steps', '-')} |")
    lines.append("")
    lines.append("Geometric mean of peer ms / fxhlo ms (> 1: fxhlo faster): " + ", ".join(
        f"{p} {math.exp(statistics.fmean(math.log(x) for x in v)):.2f} over {len(v)}"
        for p, v in ratios.items() if v))
    return "\n".join(lines) + "\n"


def chart(records: List[Dict[str, Any]], peers: List[str], path: str) -> None:
    """A PNG of the ratios peer ms / fxhlo ms per model (log scale, 1 = parity)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    others = [p for p in peers if p != "fxhlo"]
    labels = [f"{r['model']} b{r['batch']}" for r in records]
    fig, ax = plt.subplots(figsize=(max(6, 1.1 * len(labels)), 4))
    w = 0.8 / max(1, len(others))
    for k, p in enumerate(others):
        ys = []
        for r in records:
            a, b = r.get("peers", {}).get(p, {}).get("ms"), r.get("peers", {}).get("fxhlo", {}).get("ms")
            ys.append(a / b if a and b else float("nan"))
        ax.bar([i + k * w for i in range(len(labels))], ys, w, label=p)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([i + 0.4 - w / 2 for i in range(len(labels))], labels, rotation=30, ha="right")
    ax.set_ylabel("peer ms / fxhlo ms (> 1: fxhlo faster)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--batches", default="1")
    ap.add_argument("--peers", default=",".join(PEERS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--calls", type=int, default=5, help="timed calls per peer and round")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per model")
    ap.add_argument("--out", help="write the markdown table here")
    ap.add_argument("--json", help="write the records here")
    ap.add_argument("--png", help="write the chart of ratios here")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    peers = [p for p in args.peers.split(",") if p]
    bad = sorted(set(peers) - set(PEERS))
    if bad:
        ap.error(f"unknown peer(s) {bad}; known: {', '.join(PEERS)}")
    if args.worker:
        rec = run_model(args.worker, int(args.batches), peers, args.threads, args.rounds,
                        args.calls)
        print("RESULT " + json.dumps(rec))
        return 0
    models = [m for m in args.models.split(",") if m]
    bad = sorted(set(models) - set(MODELS))
    if bad:
        ap.error(f"unknown model(s) {bad}; known: {', '.join(MODELS)}")
    records = []
    for name in models:
        for batch in (int(b) for b in args.batches.split(",")):
            rec: Dict[str, Any] = {"model": name, "batch": batch, "peers": {}}
            eager_ms: List[float] = []
            # every peer in its own process beside eager: no peer's compiler settings or
            # caches (Inductor's freezing flag, Dynamo's cache of the same forward) reach another
            for peer in peers:
                print(f"[bench_models] {name} batch {batch}: {peer}", file=sys.stderr, flush=True)
                pair = ["eager"] if peer == "eager" else ["eager", peer]
                try:
                    r = subprocess.run(_worker_cmd(name, batch, pair, args.threads, args.rounds,
                                                   args.calls), env=_env(args.threads),
                                       capture_output=True, text=True, timeout=args.timeout)
                    line = next((x for x in r.stdout.splitlines()
                                 if x.startswith("RESULT ")), None)
                    if line is None:
                        err = (r.stderr.strip().splitlines() or ["no output"])[-1][:120]
                        rec["peers"][peer] = {"error": err}
                        continue
                    got = json.loads(line[7:])["peers"]
                    if "ms" in got.get("eager", {}):
                        eager_ms.append(got["eager"]["ms"])
                    if peer != "eager":
                        rec["peers"][peer] = got.get(peer, {"error": "no record"})
                except subprocess.TimeoutExpired:
                    rec["peers"][peer] = {"error": f"timed out after {args.timeout:.0f} s"}
            if "eager" in peers:
                rec["peers"]["eager"] = ({"ms": statistics.median(eager_ms), "runs": eager_ms}
                                         if eager_ms else {"error": "no eager run"})
            records.append(rec)
            print(json.dumps(rec), file=sys.stderr, flush=True)
    text = report(records, peers, " ".join(argv if argv is not None else sys.argv[1:]))
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(records, f, indent=1)
    if args.png:
        chart(records, peers, args.png)
    return 0


if __name__ == "__main__":
    sys.exit(main())
