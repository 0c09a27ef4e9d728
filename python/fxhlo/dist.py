"""Training across processes with ``torch.distributed``: DDP and FSDP2 with the fxhlo backend
against a single-process eager run of the same global batch.

    python -m fxhlo.dist --mode ddp --world 2 --steps 20 [--json out.json]
    python -m fxhlo.dist --mode fsdp2 --world 4 --backend fxhlo

Each of ``--world`` processes (gloo, CPU, rendezvous through a file: no port) trains a small
GPT-style model on its shard of every global batch, with the model compiled by
``torch.compile(backend=...)``; rank 0 then compares, step by step, the global loss (the mean of
the ranks' losses) and the final parameters with one eager process training the same model on
the whole global batch. DDP averages the ranks' gradients, FSDP2 reduce-scatters them, so both
must follow the single-process run up to f32 rounding (tolerances below). The collectives run in
torch's hooks, outside fxhlo's programs (issue 40's first step); per rank it reports the graphs
compiled, the eager partitions and the steps on the reference interpreter.

A process group that cannot form, or a rank that dies, ends every rank with an error within
``--timeout`` seconds: never a hang.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys
import tempfile
import time
import traceback
from typing import Any, Dict, List

#: f32 tolerances of the comparison with the single-process run: the ranks reduce their
#: gradients in another order than one process sums them, so values agree to f32 rounding
#: carried through 20 steps of SGD with momentum.
LOSS_RTOL, LOSS_ATOL = 1e-4, 1e-5
PARAM_RTOL, PARAM_ATOL = 1e-4, 1e-5

VOCAB, DIM, HEADS, LAYERS, SEQ = 64, 128, 4, 2, 16

#: the modes besides DDP: FSDP2 alone, tensor parallelism alone (DTensor, column-wise q/k/v and
#: fc, row-wise proj and out), and both on a 2-D mesh (data x 2-way tensor)
MODES = ("fsdp2", "tp", "fsdp2+tp")


def _model():
    import torch
    from torch import nn
    import torch.nn.functional as F

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(DIM)
            self.q = nn.Linear(DIM, DIM)
            self.k = nn.Linear(DIM, DIM)
            self.v = nn.Linear(DIM, DIM)
            self.proj = nn.Linear(DIM, DIM)
            self.ln2 = nn.LayerNorm(DIM)
            self.fc = nn.Linear(DIM, 4 * DIM)
            self.out = nn.Linear(4 * DIM, DIM)

        def forward(self, x):
            b, t, _ = x.shape
            h = self.ln1(x)
            # -1 heads: under tensor parallelism each rank holds HEADS / ranks of them
            q, k, v = (f(h).view(b, t, -1, DIM // HEADS).transpose(1, 2)
                       for f in (self.q, self.k, self.v))
            a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, -1))
            return x + self.out(F.gelu(self.fc(self.ln2(x))))

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.tok = nn.Embedding(VOCAB, DIM)
            self.pos = nn.Embedding(SEQ, DIM)
            self.blocks = nn.ModuleList(Block() for _ in range(LAYERS))
            self.ln = nn.LayerNorm(DIM)
            self.head = nn.Linear(DIM, VOCAB)

        def forward(self, idx, targets):
            x = self.tok(idx) + self.pos(torch.arange(idx.shape[1]))
            for blk in self.blocks:
                x = blk(x)
            logits = self.head(self.ln(x))
            return F.cross_entropy(logits.reshape(-1, VOCAB), targets.reshape(-1))

    torch.manual_seed(0)
    return GPT()


def _optimizer(model):
    """SGD with momentum: Adam divides each gradient by its own running scale, so a gradient
    that is zero up to rounding (the key projection's bias, which softmax ignores) moves its
    parameter by the full learning rate in a direction set by rounding noise; eager DDP then
    differs from one eager process by 1e-3. SGD keeps such noise at its size."""
    import torch
    return torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _batches(steps: int, global_batch: int):
    import torch
    g = torch.Generator().manual_seed(1)
    data = torch.randint(0, VOCAB, (steps, global_batch, SEQ + 1), generator=g)
    return [(d[:, :-1], d[:, 1:]) for d in data]


def train_eager(steps: int, global_batch: int) -> Dict[str, Any]:
    """The reference: one process, eager, the whole global batch per step."""
    import torch
    model = _model()
    opt = _optimizer(model)
    losses = []
    for idx, tgt in _batches(steps, global_batch):
        loss = model(idx, tgt)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return {"losses": losses,
            "params": {k: v.detach().clone() for k, v in model.named_parameters()}}


def _rank_main(rank: int, world: int, mode: str, steps: int, global_batch: int, backend: str,
               rdzv: str, out_dir: str, timeout: float, fail_rank: int) -> None:
    import torch
    import torch.distributed as dist
    os.environ.setdefault("FXHLO_NUM_THREADS", "1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rdzv}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=timeout))
    result: Dict[str, Any] = {"rank": rank}
    try:
        if rank == fail_rank:
            raise RuntimeError("this rank was told to fail (a test of the error path)")
        model = _model()
        dp_rank, dp_size = rank, world  # how the global batch is split
        if mode == "ddp":
            from torch.nn.parallel import DistributedDataParallel as DDP
            # 1 MiB buckets (DDP's first bucket is 1 MiB; later ones may not be smaller): the
            # model's 1.6 MiB of parameters make two, and Dynamo's DDP optimizer splits the
            # graph at the boundary
            model = DDP(model, bucket_cap_mb=1)
            compiled = torch.compile(model, backend=backend) if backend != "eager" else model
        elif mode in MODES:
            # as TorchTitan does: each transformer block parallelized, compiled, then sharded;
            # Dynamo skips FSDP2's hooks, and a whole-model compile would break the graph
            # inside the loop over the blocks and leave the model to eager
            from torch.distributed.device_mesh import init_device_mesh
            from torch.distributed.fsdp import fully_shard
            from torch.distributed.tensor.parallel import (ColwiseParallel, RowwiseParallel,
                                                           parallelize_module)
            tp = {"fsdp2": 1, "tp": world, "fsdp2+tp": 2}[mode]
            if world % tp:
                raise ValueError(f"{mode} needs a process count divisible by {tp}")
            mesh = init_device_mesh("cpu", (world // tp, tp), mesh_dim_names=("dp", "tp"))
            dp_rank, dp_size = mesh["dp"].get_local_rank(), world // tp
            plan = {"q": ColwiseParallel(), "k": ColwiseParallel(), "v": ColwiseParallel(),
                    "proj": RowwiseParallel(), "fc": ColwiseParallel(), "out": RowwiseParallel()}
            for blk in model.blocks:
                if tp > 1:
                    parallelize_module(blk, mesh["tp"], plan)
                if backend != "eager":
                    blk.compile(backend=backend)
                if dp_size > 1 or mode != "tp":
                    fully_shard(blk, mesh=mesh["dp"])
            if dp_size > 1 or mode != "tp":
                fully_shard(model, mesh=mesh["dp"])
            compiled = model
        else:
            raise ValueError(f"unknown mode {mode!r} ({', '.join(('ddp',) + MODES)})")
        opt = _optimizer(model)
        per = global_batch // dp_size
        losses = []
        for idx, tgt in _batches(steps, global_batch):
            lo, hi = dp_rank * per, (dp_rank + 1) * per
            loss = compiled(idx[lo:hi], tgt[lo:hi])
            opt.zero_grad()
            loss.backward()
            opt.step()
            g = loss.detach().clone()
            dist.all_reduce(g)
            losses.append(g.item() / world)
        params = {}
        for k, v in model.named_parameters():
            if hasattr(v, "full_tensor"):  # FSDP2: a DTensor shard; gather the whole value
                v = v.full_tensor()
            params[k.replace("module.", "")] = v.detach().clone()
        result["losses"] = losses
        if rank == 0:
            torch.save(params, os.path.join(out_dir, "params.pt"))
        if backend == "fxhlo":
            from .runner import STATS
            s = STATS.as_dict()
            result["graphs"] = s["graphs_compiled"] + s["cache_hits"]
            result["eager_partitions"] = s["partitions"]
            result["fallback_graphs"] = s["fallback_graphs"]
            result["steps"] = sum(g["steps"] for g in s["graphs"].values())
            result["interpreter_steps"] = sum(g["fallback_steps"] for g in s["graphs"].values())
            result["graph_names"] = sorted(s["graphs"])
            eager_ops: Dict[str, int] = {}
            for g in s["graphs"].values():
                for op, n in g["eager_ops"].items():
                    eager_ops[op] = eager_ops.get(op, 0) + n
            result["eager_ops"] = eager_ops
    except Exception as e:  # noqa: BLE001 - reported to the launcher, which fails the run
        result["error"] = f"{type(e).__name__}: {e}"
        result["traceback"] = traceback.format_exc()[-3000:]
    finally:
        with open(os.path.join(out_dir, f"rank{rank}.json"), "w") as f:
            json.dump(result, f)
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def run(mode: str, world: int, steps: int = 20, global_batch: int = 8, backend: str = "fxhlo",
        timeout: float = 300, fail_rank: int = -1) -> Dict[str, Any]:
    """Trains on ``world`` processes and compares with one eager process; returns the ranks'
    reports, the losses of both runs, the largest differences and ``ok``. Raises
    ``RuntimeError`` naming the ranks that failed (``fail_rank`` makes one fail on purpose: the
    others then stop at their next collective after ``timeout`` seconds)."""
    import torch
    import torch.multiprocessing as mp
    if global_batch % world:
        raise ValueError(f"the global batch {global_batch} does not split over {world} ranks")
    if mode not in ("ddp",) + MODES:
        raise ValueError(f"unknown mode {mode!r} ({', '.join(('ddp',) + MODES)})")
    with tempfile.TemporaryDirectory(prefix="fxhlo-dist-") as tmp:
        rdzv = os.path.join(tmp, "rendezvous")
        ctx = mp.start_processes(_rank_main, nprocs=world, join=False, start_method="spawn",
                                 args=(world, mode, steps, global_batch, backend, rdzv, tmp,
                                       timeout, fail_rank))
        deadline = timeout + 120
        t0 = time.monotonic()
        try:
            while not ctx.join(timeout=5):
                if time.monotonic() - t0 > deadline:
                    raise TimeoutError(f"{mode} on {world} processes ran past {deadline:.0f} s")
        except mp.ProcessException as e:  # a rank died (a signal, an exit code)
            raise RuntimeError(f"{mode} on {world} processes: {e}") from None
        finally:
            for p in ctx.processes:
                if p.is_alive():
                    p.kill()
        ranks = []
        for r in range(world):
            path = os.path.join(tmp, f"rank{r}.json")
            if not os.path.exists(path):
                raise RuntimeError(f"rank {r} wrote no report")
            with open(path) as f:
                ranks.append(json.load(f))
        errors = [f"rank {x['rank']}: {x['error']}" for x in ranks if "error" in x]
        if errors:
            raise RuntimeError("; ".join(errors) + "\n" + ranks[0].get("traceback", ""))
        params = torch.load(os.path.join(tmp, "params.pt"))
    ref = train_eager(steps, global_batch)
    losses = ranks[0]["losses"]
    loss_diff = max(abs(a - b) for a, b in zip(losses, ref["losses"]))
    loss_ok = all(abs(a - b) <= LOSS_ATOL + LOSS_RTOL * abs(b)
                  for a, b in zip(losses, ref["losses"]))
    if set(params) != set(ref["params"]):
        raise RuntimeError(f"parameter names differ: {sorted(set(params) ^ set(ref['params']))}")
    diffs = {k: (params[k] - ref["params"][k]).abs().max().item() for k in params}
    worst = max(diffs, key=diffs.get)
    param_diff = diffs[worst]
    param_ok = all(torch.allclose(params[k], ref["params"][k], rtol=PARAM_RTOL, atol=PARAM_ATOL)
                   for k in params)
    return {"mode": mode, "world": world, "steps": steps, "backend": backend,
            "losses": losses, "eager_losses": ref["losses"], "max_loss_diff": loss_diff,
            "max_param_diff": param_diff, "worst_param": worst, "ok": loss_ok and param_ok,
            "ranks": [{k: v for k, v in x.items() if k != "losses"} for x in ranks]}


def main(argv: List[str] = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mode", choices=("ddp",) + MODES, default="ddp")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--global-batch", type=int, default=8)
    ap.add_argument("--backend", default="fxhlo")
    ap.add_argument("--timeout", type=float, default=300,
                    help="seconds a collective may wait before the process group gives up")
    ap.add_argument("--json", help="write the result here")
    a = ap.parse_args(argv)
    if not 1 <= a.world <= 64:
        ap.error("--world must be between 1 and 64")
    try:
        r = run(a.mode, a.world, a.steps, a.global_batch, a.backend, a.timeout)
    except Exception as e:  # noqa: BLE001 - the CLI reports and exits non-zero
        print(f"error: {e}", file=sys.stderr)
        return 1
    for i, (x, y) in enumerate(zip(r["losses"], r["eager_losses"])):
        print(f"step {i:2d}  loss {x:.6f}  eager 1 process {y:.6f}  diff {abs(x - y):.2e}")
    for x in r["ranks"]:
        print("rank {rank}: graphs {g}, eager partitions {p}, program steps {n}, of them on the "
              "reference interpreter {s}".format(
                  rank=x["rank"], g=x.get("graphs", "-"), p=x.get("eager_partitions", "-"),
                  n=x.get("steps", "-"), s=x.get("interpreter_steps", "-")))
    print(f"{r['mode']} x{r['world']} ({r['backend']}): max loss diff {r['max_loss_diff']:.2e}, "
          f"max parameter diff {r['max_param_diff']:.2e} ({r['worst_param']}): {'ok' if r['ok'] else 'MISMATCH'}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(r, f, indent=1)
    return 0 if r["ok"] else 2


if __name__ == "__main__":
    sys.exit(main())
