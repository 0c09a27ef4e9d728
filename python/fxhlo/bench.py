"""Benchmark fxhlo against PyTorch eager, torch.compile (Inductor) and XLA, in one run.

    cd python && python -m fxhlo.bench                  # full run, every workload
    python -m fxhlo.bench --quick                       # tiny shapes, 2 iterations (a smoke test)
    python -m fxhlo.bench --only a,c --iters 10 --threads 4 --out bench.md --json bench.json

Workloads (f32, inference, ``torch.no_grad``):

    a  MLP 1024-4096-4096-1024, batch 256, GELU
    b  nn.TransformerEncoderLayer(d_model 512, nhead 8, ff 2048, dropout 0, batch_first), 8x256
    c  gelu(x*w+b)*sigmoid(x)+x on 4096x4096 (w, b: rows of 4096 broadcast)
    d  softmax(layer_norm(x)) over the rows of 8192x1024
    e  3x(conv3x3 pad 1 + relu) + maxpool2d(2) on 8x3x128x128, channels 3->32->32->32
    f  the testdata models resnet18 and gpt2 (fxhlo.models.build)

Peers, per workload: PyTorch eager; ``torch.compile(backend="inductor")`` (first-call compile
time and steady state, with a fresh Inductor cache per run); XLA on CPU running the StableHLO
that ``fxhlo lower`` emits (through jax, in a worker process); fxhlo's fast runtime through
``fxhlo bench`` and ``fxhlo check``.  The timed calls come in rounds (``--rounds``, default 4)
in which the peers take turns in a rotating order, so that a slow or fast stretch of a shared
machine falls on every peer alike.  Machine peaks (copy bandwidth, 4096^3 sgemm) are measured in
the same run, and c and d again on a few rows that stay in cache (fxhlo on one thread): their
arithmetic ceilings.  Every peer can fail on its own: its cell then reads ``error: <reason>``
and the run goes on.  See docs/benchmarks.md for how to read the table.
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

# Nothing heavy is imported at module level: thread settings must be in the environment before
# numpy (OpenBLAS), torch (OpenMP) and jax (PJRT's thread pool) are first imported.

REPO = Path(__file__).resolve().parents[2]
PEERS = ("eager", "inductor", "xla", "fxhlo")
KEYS = ("a", "b", "c", "d", "e", "f-resnet18", "f-gpt2")
XLA_FLAGS_DEFAULT = "--xla_cpu_multi_thread_eigen=true"

# Shapes of every workload, full size and --quick.
FULL = {
    "a": {"batch": 256, "sizes": (1024, 4096, 4096, 1024)},
    "b": {"d_model": 512, "nhead": 8, "ff": 2048, "seq": 256, "batch": 8},
    "c": {"rows": 4096, "cols": 4096},
    "d": {"rows": 8192, "cols": 1024},
    "e": {"batch": 8, "channels": (3, 32, 32, 32), "hw": 128},
}
# Rows of the in-cache runs of c and d (see `in_cache_ceiling`): 32x4096 and 256x1024, 1 MiB in
# and 1 MiB out, which stay in one core's L2 and L3 from one run to the next.
CACHE_ROWS = {"full": {"c": 32, "d": 256}, "quick": {"c": 16, "d": 32}}
# Timed runs of an in-cache program, one thread.
CACHE_ITERS = {"full": (200, 20), "quick": (2, 1)}
QUICK = {
    "a": {"batch": 8, "sizes": (64, 128, 128, 64)},
    "b": {"d_model": 32, "nhead": 4, "ff": 64, "seq": 16, "batch": 2},
    "c": {"rows": 256, "cols": 256},
    "d": {"rows": 256, "cols": 128},
    "e": {"batch": 2, "channels": (3, 8, 8, 8), "hw": 16},
}
# Copies are timed at two sizes: 64 MiB, as large as the biggest operand of workloads c and d
# (their data fits in a large last-level cache), and 256 MiB (source and destination together
# larger than most caches); the peak is the best of every copy at every size.
PEAK_SIZES = {"full": {"copy_mib": (64, 256), "gemm_n": 4096},
              "quick": {"copy_mib": (16,), "gemm_n": 256}}


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def short_error(e: BaseException, limit: int = 90) -> str:
    """One line, no table-breaking characters."""
    msg = str(e).strip().splitlines()
    first = next((m.strip() for m in msg if m.strip()), "")
    text = f"{type(e).__name__}: {first}" if first else type(e).__name__
    if isinstance(e, PeerError):
        text = first
    text = text.replace("|", "/").replace("`", "'")
    return text if len(text) <= limit else text[: limit - 3] + "..."


class PeerError(RuntimeError):
    """A peer failed in a way already described in its message."""


# ------------------------------------------------------------------------------- work counts

def mlp_flops(batch: int, sizes: Sequence[int]) -> float:
    return float(sum(2 * batch * a * b for a, b in zip(sizes[:-1], sizes[1:])))


def encoder_flops(d_model: int, nhead: int, ff: int, seq: int, batch: int) -> float:
    """Matmul FLOPs of one encoder layer: qkv and out projections, q@k^T and p@v, the two
    feed-forward linears (nhead does not change the count)."""
    tokens = batch * seq
    proj = 2 * tokens * d_model * (3 * d_model + d_model)
    attn = 2 * 2 * batch * seq * seq * d_model
    ffn = 2 * 2 * tokens * d_model * ff
    return float(proj + attn + ffn)


def conv_flops(batch: int, channels: Sequence[int], hw: int) -> float:
    return float(sum(2 * batch * hw * hw * 9 * ci * co
                     for ci, co in zip(channels[:-1], channels[1:])))


def chain_bytes(rows: int, cols: int) -> float:
    return float(4 * (2 * rows * cols + 2 * cols))   # x in, y out, w and b


def lnsoftmax_bytes(rows: int, cols: int) -> float:
    return float(4 * (2 * rows * cols + 2 * cols))   # x in, y out, ln weight and bias


# ------------------------------------------------------------------------------- workloads

@dataclass
class Workload:
    key: str
    title: str
    build: Callable[[], Tuple[Any, tuple]]  # -> (model in eval mode, example inputs)
    metric: str                              # "flops" or "bytes"
    work: Optional[float]                    # FLOPs or bytes per call (None: count it)
    tolerance: Optional[Dict[str, float]] = None
    # The same model on data that stays in cache: (build, bytes per call, shape), for the
    # arithmetic ceiling of a bandwidth workload (see `in_cache_ceiling`).
    in_cache: Optional[Tuple[Callable[[], Tuple[Any, tuple]], float, str]] = None


def _modules():
    import torch
    from torch import nn
    import torch.nn.functional as F

    class MLP(nn.Module):
        def __init__(self, sizes):
            super().__init__()
            self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))

        def forward(self, x):
            for i, layer in enumerate(self.layers):
                x = layer(x)
                if i + 1 < len(self.layers):
                    x = F.gelu(x)
            return x

    class Chain(nn.Module):
        def __init__(self, cols):
            super().__init__()
            self.w = nn.Parameter(torch.randn(cols))
            self.b = nn.Parameter(torch.randn(cols))

        def forward(self, x):
            return F.gelu(x * self.w + self.b) * torch.sigmoid(x) + x

    class LNSoftmax(nn.Module):
        def __init__(self, cols):
            super().__init__()
            self.ln = nn.LayerNorm(cols)
            with torch.no_grad():
                self.ln.weight.copy_(1.0 + 0.1 * torch.randn(cols))
                self.ln.bias.copy_(0.1 * torch.randn(cols))

        def forward(self, x):
            return torch.softmax(self.ln(x), dim=-1)

    class ConvStack(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.convs = nn.ModuleList(nn.Conv2d(a, b, 3, padding=1)
                                       for a, b in zip(channels[:-1], channels[1:]))

        def forward(self, x):
            for c in self.convs:
                x = torch.relu(c(x))
            return F.max_pool2d(x, 2)

    return MLP, Chain, LNSoftmax, ConvStack


def workloads(quick: bool) -> List[Workload]:
    S = QUICK if quick else FULL

    def seeded(fn):
        def build():
            import torch
            torch.manual_seed(0)
            m, ins = fn()
            return m.eval(), tuple(ins)
        return build

    def a():
        import torch
        MLP = _modules()[0]
        s = S["a"]
        return MLP(s["sizes"]), (torch.randn(s["batch"], s["sizes"][0]),)

    def b():
        import torch
        from torch import nn
        s = S["b"]
        m = nn.TransformerEncoderLayer(s["d_model"], s["nhead"], dim_feedforward=s["ff"],
                                       dropout=0.0, batch_first=True)
        return m, (torch.randn(s["batch"], s["seq"], s["d_model"]),)

    def c(rows=None):
        import torch
        s = S["c"]
        return _modules()[1](s["cols"]), (torch.randn(rows or s["rows"], s["cols"]),)

    def d(rows=None):
        import torch
        s = S["d"]
        return _modules()[2](s["cols"]), (torch.randn(rows or s["rows"], s["cols"]),)

    cache_rows = CACHE_ROWS["quick" if quick else "full"]

    def in_cache(key, fn, nbytes):
        rows, cols = cache_rows[key], S[key]["cols"]
        return (seeded(lambda: fn(rows)), nbytes(rows, cols), f"{rows}x{cols}")

    def e():
        import torch
        s = S["e"]
        return _modules()[3](s["channels"]), (
            torch.randn(s["batch"], s["channels"][0], s["hw"], s["hw"]),)

    def testdata(name):
        def build():
            from . import models
            return models.build(name)
        return build

    def spec_tol(name):
        try:
            from . import models
            return models.REGISTRY[name].tolerance
        except Exception:
            return None

    sa, sb, sc, sd, se = (S[k] for k in "abcde")
    return [
        Workload("a", "a mlp {}x{} GELU".format(sa["batch"], "-".join(map(str, sa["sizes"]))),
                 seeded(a), "flops", mlp_flops(sa["batch"], sa["sizes"])),
        Workload("b", "b encoder d{} h{} ff{} {}x{}".format(sb["d_model"], sb["nhead"], sb["ff"],
                                                         sb["batch"], sb["seq"]),
                 seeded(b), "flops", encoder_flops(**sb),
                 tolerance={"rtol": 1e-4, "atol": 1e-4}),
        Workload("c", "c gelu(x*w+b)*sigmoid(x)+x {}x{}".format(sc["rows"], sc["cols"]),
                 seeded(c), "bytes", chain_bytes(sc["rows"], sc["cols"]),
                 in_cache=in_cache("c", c, chain_bytes)),
        Workload("d", "d softmax(layer_norm) {}x{}".format(sd["rows"], sd["cols"]),
                 seeded(d), "bytes", lnsoftmax_bytes(sd["rows"], sd["cols"]),
                 tolerance={"rtol": 1e-4, "atol": 1e-5},
                 in_cache=in_cache("d", d, lnsoftmax_bytes)),
        Workload("e", "e 3x(conv3x3+relu)+maxpool {}x{}x{}x{} ch {}".format(
                     se["batch"], se["channels"][0], se["hw"], se["hw"],
                     "-".join(map(str, se["channels"]))),
                 seeded(e), "flops", conv_flops(se["batch"], se["channels"], se["hw"]),
                 tolerance={"rtol": 1e-4, "atol": 1e-4}),
        Workload("f-resnet18", "f resnet18 (testdata)", testdata("resnet18"), "flops", None,
                 tolerance=spec_tol("resnet18")),
        Workload("f-gpt2", "f gpt2 (testdata)", testdata("gpt2"), "flops", None,
                 tolerance=spec_tol("gpt2")),
    ]


def select(keys: Optional[str]) -> List[str]:
    if not keys:
        return list(KEYS)
    out: List[str] = []
    for k in (x.strip() for x in keys.split(",") if x.strip()):
        if k == "f":
            got = ["f-resnet18", "f-gpt2"]
        elif k in KEYS:
            got = [k]
        elif f"f-{k}" in KEYS:
            got = [f"f-{k}"]
        else:
            raise SystemExit(f"--only: unknown workload {k!r} (known: a, b, c, d, e, f, "
                             f"f-resnet18, f-gpt2)")
        out += [g for g in got if g not in out]
    return out


def count_flops(model, inputs) -> Optional[float]:
    """Matmul/conv FLOPs of one call, counted by torch's FlopCounterMode."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    with torch.no_grad():
        fc = FlopCounterMode(display=False)
        with fc:
            model(*inputs)
    return float(fc.get_total_flops())


# ------------------------------------------------------------------------------- timing

def time_calls(fn: Callable[[], Any], iters: int, warmup: int) -> List[float]:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(max(1, iters)):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return times


def summary(times: List[float]) -> Dict[str, Any]:
    return {"run_ms_median": statistics.median(times), "run_ms_min": min(times),
            "iters": len(times), "times_ms": times}


# ------------------------------------------------------------------------------- fxhlo binary

def fxhlo_bin() -> Optional[str]:
    """``$FXHLO_BIN``, else ``target/release/fxhlo`` in the repository, else ``fxhlo`` on PATH
    (never a debug build: its timings would mean nothing)."""
    env = os.environ.get("FXHLO_BIN")
    if env:
        return env
    exe = REPO / "target" / "release" / "fxhlo"
    if exe.exists():
        return str(exe)
    return shutil.which("fxhlo")


def run_cmd(cmd: List[str], timeout: float) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise PeerError(f"timeout after {timeout:.0f} s: {Path(cmd[0]).name} {cmd[1]}") from None
    except OSError as e:
        raise PeerError(f"cannot run {cmd[0]}: {e.strerror or e}") from None


def tail_reason(r: subprocess.CompletedProcess) -> str:
    lines = [l.strip() for l in (r.stderr or r.stdout or "").splitlines() if l.strip()]
    errs = [l for l in lines if l.startswith("error")]
    why = (errs or lines or [f"exit {r.returncode}"])[-1]
    if r.returncode < 0:
        why = f"killed by signal {-r.returncode}: {why}"
    return why


# ------------------------------------------------------------------------------- peers

def torch_times(fn, inputs, iters, warmup) -> List[float]:
    """Times ``fn(*inputs)`` (eager or compiled) without autograd."""
    import torch
    with torch.no_grad():
        return time_calls(lambda: fn(*inputs), iters, warmup)


def _max_abs_diff(a, b) -> Optional[float]:
    import torch
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        if a.shape != b.shape:
            return float("inf")
        return float((a.double() - b.double()).abs().max()) if a.numel() else 0.0
    return None


def prepare_inductor(model, inputs, freezing: bool):
    """Compiles ``model`` with Inductor (the first call, timed); returns the compiled callable
    and what the first call showed."""
    import torch
    import torch._dynamo
    torch._dynamo.reset()
    if freezing:
        import torch._inductor.config as icfg
        icfg.freezing = True
    compiled = torch.compile(model, backend="inductor")
    with torch.no_grad():
        ref = model(*inputs)
        t0 = time.perf_counter()
        out = compiled(*inputs)
        first_ms = (time.perf_counter() - t0) * 1e3
    info = {"first_call_ms": first_ms, "max_abs_diff_vs_eager": _max_abs_diff(out, ref)}
    return compiled, info


def inductor_compile_ms(info: Dict[str, Any], eager_ms: Optional[float]) -> None:
    """Inductor's compile time: its first call minus eager's median (or the first call)."""
    first_ms = info["first_call_ms"]
    info["compile_ms"] = first_ms - eager_ms if eager_ms is not None else first_ms
    info["compile_note"] = ("first call minus eager median" if eager_ms is not None
                            else "first call (eager not measured)")


def fxhlo_check(exe: str, folder: str, iters: int, warmup: int, threads: int,
                timeout: float) -> Dict[str, Any]:
    """``fxhlo check`` once: correctness, and how many timed runs fit in the timeout
    (``iters`` of the result)."""
    res: Dict[str, Any] = {}
    # correctness once (also tells how long one run takes, to keep `bench` inside the timeout)
    t0 = time.perf_counter()
    r = run_cmd([exe, "check", folder, "--threads", str(threads), "--stats"], timeout)
    check_s = time.perf_counter() - t0
    if r.returncode == 0:
        res["check"] = "ok"
    elif r.returncode == 1:
        res["check"] = "MISMATCH"
    else:
        res["check"] = f"error: {tail_reason(r)}"
    res["check_output"] = (r.stdout or "")[-2000:]
    res["check_stats"] = (r.stderr or "")[-4000:]
    res["check_wall_s"] = check_s

    n = iters
    if check_s * (iters + warmup) > 0.8 * timeout:
        # a slow program (e.g. reference-interpreter fallbacks): fewer runs, said so
        n = max(1, int(0.8 * timeout / max(check_s, 1e-9)) - warmup)
        n = min(n, iters)
        res["iters_reduced_from"] = iters
    res["iters"] = n
    return res


def fxhlo_times(exe: str, folder: str, iters: int, warmup: int, threads: int,
                timeout: float) -> Dict[str, Any]:
    """One ``fxhlo bench`` process: its JSON line (``times_ms``: the timed runs, sorted)."""
    r = run_cmd([exe, "bench", folder, "--iters", str(iters), "--warmup", str(warmup),
                 "--threads", str(threads)], timeout)
    if r.returncode != 0:
        raise PeerError(f"fxhlo bench: {tail_reason(r)}")
    line = next((l for l in reversed(r.stdout.splitlines()) if l.strip().startswith("{")), None)
    if line is None:
        raise PeerError("fxhlo bench printed no JSON line")
    data = json.loads(line)
    if not data.get("times_ms"):
        raise PeerError("fxhlo bench printed no times_ms (an older binary?)")
    return data


def xla_lower(folder: str, exe: str, mlir: str, timeout: float) -> Dict[str, Any]:
    """fxhlo's StableHLO for XLA, written to ``mlir``."""
    t0 = time.perf_counter()
    r = run_cmd([exe, "lower", folder, "-o", mlir], timeout)
    lower_ms = (time.perf_counter() - t0) * 1e3
    if r.returncode != 0:
        raise PeerError(f"fxhlo lower: {tail_reason(r)}")
    return {"lower_ms": lower_ms}


def xla_times(folder: str, mlir: str, iters: int, warmup: int, timeout: float) -> Dict[str, Any]:
    """XLA in a worker process (an XLA abort cannot take the whole run down): compiles
    ``mlir``, checks the outputs, times ``iters`` calls (``times_ms``)."""
    return _worker(["xla", folder, mlir, str(iters), str(warmup)], timeout)


def _worker(args: List[str], timeout: float) -> Dict[str, Any]:
    cmd = [sys.executable, "-m", "fxhlo.bench", "--_worker"] + args
    env = dict(os.environ)
    # The folder holding this fxhlo package, so the worker imports the same one.
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).resolve().parents[1])] +
                                        ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise PeerError(f"timeout after {timeout:.0f} s (XLA worker)") from None
    line = next((l for l in reversed(r.stdout.splitlines()) if l.startswith("{")), None)
    if r.returncode != 0 or line is None:
        raise PeerError(f"XLA worker: {tail_reason(r)}")
    data = json.loads(line)
    if "error" in data:
        raise PeerError(data["error"])
    return data


def worker_main(args: List[str]) -> int:
    """``--_worker xla FOLDER MLIR ITERS WARMUP`` or ``--_worker sgemm N``: prints one JSON line."""
    try:
        if args[0] == "xla":
            out = _xla_run(args[1], args[2], int(args[3]), int(args[4]))
        elif args[0] == "sgemm":
            out = _xla_sgemm(int(args[1]))
        else:
            out = {"error": f"unknown worker {args[0]}"}
    except Exception as e:  # reported by the parent as this peer's error
        out = {"error": short_error(e)}
    print(json.dumps(out))
    return 0


def _xla_run(folder: str, mlir: str, iters: int, warmup: int) -> Dict[str, Any]:
    import numpy as np
    from .testing import xla
    runner = xla.Runner()
    jax = runner.jax
    text = Path(mlir).read_text()
    try:
        xla.verify(text)
    except ValueError as e:
        raise PeerError(short_error(e)) from None
    t0 = time.perf_counter()
    exe = runner.backend.compile_and_load(text, runner.device_list)
    compile_ms = (time.perf_counter() - t0) * 1e3
    inputs, weights, expected, tol = xla.load_testdata(folder)
    dev = runner.devices[0]
    args = [jax.device_put(np.asarray(x), dev) for x in inputs + weights]
    for a in args:
        a.block_until_ready()

    def call():
        outs = exe.execute(args)
        for o in outs:
            o.block_until_ready()
        return outs

    outs = [np.asarray(o) for o in call()]
    t = dict(xla.TOLERANCE)
    if tol:
        for k in ("float32", "float64"):
            t[k] = (max(tol["rtol"], t[k][0]), max(tol["atol"], t[k][1]))
    check = "ok"
    if len(outs) != len(expected):
        check = f"MISMATCH: {len(outs)} outputs, expected {len(expected)}"
    else:
        for i, (a, b) in enumerate(zip(outs, expected)):
            try:
                xla.assert_close(a, b, f"output {i}", t)
            except AssertionError as e:
                check = f"MISMATCH: {str(e)[:200]}"
                break
    res = summary(time_calls(call, iters, warmup))
    res.update({"compile_ms": compile_ms, "check": check, "jax": jax.__version__,
                "pjrt_nproc": os.environ.get("PJRT_NPROC"),
                "xla_flags": os.environ.get("XLA_FLAGS")})
    return res


def _xla_sgemm(n: int) -> Dict[str, Any]:
    import numpy as np
    from .testing import xla
    jax = xla._jax()
    import jax.numpy as jnp
    dev = jax.devices("cpu")[0]
    rng = np.random.default_rng(0)
    a = jax.device_put(rng.standard_normal((n, n), dtype=np.float32), dev)
    b = jax.device_put(rng.standard_normal((n, n), dtype=np.float32), dev)
    f = jax.jit(jnp.matmul)
    f(a, b).block_until_ready()
    best = min(time_calls(lambda: f(a, b).block_until_ready(), 3, 1))
    return {"ms": best, "gflops": 2.0 * n ** 3 / (best * 1e-3) / 1e9, "jax": jax.__version__}


# ------------------------------------------------------------------------------- peaks

def measure_peaks(quick: bool, timeout: float, with_xla: bool, threads: int,
                  exe: Optional[str]) -> Dict[str, Any]:
    import numpy as np
    import torch
    sizes = PEAK_SIZES["quick" if quick else "full"]
    peaks: Dict[str, Any] = {"copy": {}, "sgemm": {}, "copy_mib": list(sizes["copy_mib"]),
                             "gemm_n": sizes["gemm_n"]}
    reps = 5

    def copy_peak(name, nbytes, fn=None, times=None):
        try:
            best = min(times() if times else time_calls(fn, reps, 1))
            peaks["copy"][name] = {"ms": best, "gbs": 2.0 * nbytes / (best * 1e-3) / 1e9}
        except Exception as e:
            peaks["copy"][name] = {"error": short_error(e)}

    for mib in sizes["copy_mib"]:
        nbytes = mib * 2 ** 20
        src = np.ones(nbytes // 4, np.float32)
        dst = np.zeros_like(src)
        copy_peak(f"numpy {mib} MiB", nbytes, lambda: np.copyto(dst, src))
        del src, dst
        tsrc = torch.ones(nbytes // 4)
        tdst = torch.zeros_like(tsrc)
        copy_peak(f"torch {mib} MiB", nbytes, lambda: tdst.copy_(tsrc))
        del tsrc, tdst
        # fxhlo's streaming copy (non-temporal stores: no read of the destination's lines).

        def stream(mib=mib):
            if not exe:
                raise RuntimeError("no fxhlo binary")
            r = run_cmd([exe, "copy-peak", "--mib", str(mib), "--iters", str(reps),
                         "--threads", str(threads)], timeout)
            if r.returncode != 0:
                raise RuntimeError(r.stderr.strip() or f"exit {r.returncode}")
            return json.loads(r.stdout)["times_ms"]
        copy_peak(f"fxhlo {mib} MiB", nbytes, times=stream)

    n = sizes["gemm_n"]
    flops = 2.0 * n ** 3

    def gemm_peak(name, fn):
        try:
            best = min(time_calls(fn, 3, 1))
            peaks["sgemm"][name] = {"ms": best, "gflops": flops / (best * 1e-3) / 1e9}
        except Exception as e:
            peaks["sgemm"][name] = {"error": short_error(e)}

    ta, tb = torch.randn(n, n), torch.randn(n, n)
    tc = torch.empty(n, n)
    gemm_peak("torch", lambda: torch.matmul(ta, tb, out=tc))
    del ta, tb, tc
    rng = np.random.default_rng(0)
    na = rng.standard_normal((n, n), dtype=np.float32)
    nb = rng.standard_normal((n, n), dtype=np.float32)
    nc = np.empty((n, n), np.float32)
    gemm_peak("numpy", lambda: np.matmul(na, nb, out=nc))
    del na, nb, nc
    gc.collect()
    if with_xla:
        try:
            peaks["sgemm"]["xla"] = _worker(["sgemm", str(n)], timeout)
        except Exception as e:
            peaks["sgemm"]["xla"] = {"error": short_error(e)}

    def best(d, key):
        vals = [(v[key], k) for k, v in d.items() if key in v]
        return max(vals) if vals else (None, None)

    peaks["copy_gbs"], peaks["copy_by"] = best(peaks["copy"], "gbs")
    peaks["sgemm_gflops"], peaks["sgemm_by"] = best(peaks["sgemm"], "gflops")
    return peaks


# ------------------------------------------------------------------------------- one workload

def round_sizes(iters: int, rounds: int) -> List[int]:
    """``iters`` timed calls split into at most ``rounds`` rounds (sizes differ by one at most)."""
    r = max(1, min(rounds, iters))
    return [iters // r + (1 if k < iters % r else 0) for k in range(r)]


def run_workload(w: Workload, args, exe: Optional[str], status: Dict[str, Any]) -> Dict[str, Any]:
    """One workload on every peer: first what each peer needs (Inductor's compile, the dump,
    fxhlo's check, the StableHLO for XLA), then the timed calls in rounds in which the peers
    take turns, in an order that rotates, so that a slow or fast stretch of a shared machine
    falls on all of them alike."""
    import torch
    rec: Dict[str, Any] = {"key": w.key, "title": w.title, "metric": w.metric, "work": w.work,
                           "peers": {}}
    peers = rec["peers"]
    try:
        model, inputs = w.build()
    except Exception as e:
        err = {"error": f"build: {short_error(e)}"}
        for p in args.peers:
            peers[p] = dict(err)
        return rec

    if w.work is None:
        try:
            rec["work"] = count_flops(model, inputs)
            rec["work_note"] = "FlopCounterMode (matmul/conv FLOPs)"
        except Exception as e:
            rec["work_error"] = short_error(e)

    # Per peer: what its preparation found, and a function timing `n` calls.
    info: Dict[str, Dict[str, Any]] = {}
    timers: Dict[str, Callable[[int], Dict[str, Any]]] = {}
    wall: Dict[str, float] = {}

    def prepare(name, fn) -> Optional[Any]:
        log(f"{w.key}: {name}: preparing ...")
        t0 = time.perf_counter()
        try:
            return fn()
        except Exception as e:
            peers[name] = {"error": short_error(e)}
            log(f"{w.key}: {name}: {peers[name]['error']}")
            return None
        finally:
            wall[name] = time.perf_counter() - t0

    if "eager" in args.peers:
        info["eager"] = {}
        timers["eager"] = lambda n: {"times_ms": torch_times(model, inputs, n, args.warmup)}
    if "inductor" in args.peers:
        got = prepare("inductor", lambda: prepare_inductor(model, inputs,
                                                           args.inductor_freezing))
        if got is not None:
            compiled, info["inductor"] = got
            timers["inductor"] = lambda n: {"times_ms": torch_times(compiled, inputs, n,
                                                                    args.warmup)}
    gc.collect()

    need_dump = [p for p in ("xla", "fxhlo") if p in args.peers]
    tmp = tempfile.mkdtemp(prefix=f"fxhlo-bench-{w.key}-")
    try:
        if need_dump:
            if args.keep_dumps:
                folder = os.path.join(args.keep_dumps, w.key)
                shutil.rmtree(folder, ignore_errors=True)
            else:
                folder = os.path.join(tmp, w.key)
            from . import dump as fdump
            t0 = time.perf_counter()
            try:
                fdump.dump(model, inputs, folder, name=f"bench-{w.key}", seed=0,
                           tolerance=w.tolerance)
                rec["dump_s"] = time.perf_counter() - t0
                dump_err = None
            except Exception as e:
                dump_err = f"dump: {short_error(e)}"
                log(f"{w.key}: {dump_err}")
            gc.collect()
            for p in need_dump:
                if dump_err:
                    peers[p] = {"error": dump_err}
                elif exe is None:
                    peers[p] = {"error": "no fxhlo binary (FXHLO_BIN, target/release/fxhlo, "
                                         "PATH)"}
                elif p == "xla":
                    mlir = os.path.join(tmp, "model.mlir")
                    got = prepare("xla", lambda: xla_lower(folder, exe, mlir, args.timeout))
                    if got is not None:
                        info["xla"] = got
                        timers["xla"] = lambda n: xla_times(folder, mlir, n, args.warmup,
                                                            args.timeout)
                elif not status.get("has_bench", True):
                    peers[p] = {"error": f"{exe} has no 'bench' verb"}
                else:
                    got = prepare("fxhlo", lambda: fxhlo_check(exe, folder, args.iters,
                                                               args.warmup, args.threads,
                                                               args.timeout))
                    if got is not None:
                        info["fxhlo"] = got
                        timers["fxhlo"] = lambda n: fxhlo_times(exe, folder, n, args.warmup,
                                                                args.threads, args.timeout)

        # The timed calls, in rounds.
        order = [p for p in PEERS if p in timers]
        times: Dict[str, List[float]] = {p: [] for p in order}
        first: Dict[str, Dict[str, Any]] = {}
        sizes = round_sizes(args.iters, args.rounds)
        # Calls per round and peer; a slow fxhlo program runs fewer times (see fxhlo_check),
        # spread over the same rounds.
        per_round = {p: sizes for p in order}
        if "fxhlo" in per_round:
            few = round_sizes(info["fxhlo"]["iters"], len(sizes))
            per_round["fxhlo"] = few + [0] * (len(sizes) - len(few))
        for r in range(len(sizes)):
            k = r % max(1, len(order))
            for p in order[k:] + order[:k]:
                n_p = per_round[p][r]
                if p not in timers or n_p == 0:
                    continue
                t0 = time.perf_counter()
                try:
                    out = timers[p](n_p)
                except Exception as e:
                    peers[p] = {"error": short_error(e)}
                    del timers[p]
                    log(f"{w.key}: {p}: {peers[p]['error']}")
                    continue
                finally:
                    wall[p] = wall.get(p, 0.0) + time.perf_counter() - t0
                times[p] += out.pop("times_ms")
                first.setdefault(p, out)
        for p in order:
            if p not in timers or not times[p]:
                continue
            res = dict(first.get(p, {}))
            res.update(info.get(p, {}))
            res.update(summary(times[p]))
            res["rounds"] = len(sizes)
            res["wall_s"] = wall.get(p, 0.0)
            peers[p] = res
            log(f"{w.key}: {p}: {res['run_ms_median']:.3f} ms (median of {len(times[p])} "
                f"calls in {len(sizes)} rounds)")
        ind = peers.get("inductor")
        if ind and "error" not in ind:
            inductor_compile_ms(ind, peers.get("eager", {}).get("run_ms_median"))
        fx = peers.get("fxhlo")
        if w.in_cache and exe and fx and "error" not in fx:
            log(f"{w.key}: fxhlo: in-cache run ({w.in_cache[2]}, one thread) ...")
            rec["in_cache"] = in_cache_ceiling(w, args, exe, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    derive(rec)
    return rec


def in_cache_ceiling(w: Workload, args, exe: str, tmp: str) -> Dict[str, Any]:
    """The arithmetic ceiling of a bandwidth workload: fxhlo's program for the same model on a
    few rows (``w.in_cache``), whose data stays in cache from one run to the next, timed on one
    thread.  Its rate (the workload's bytes per second at that size) times the thread count is
    the most the full-size run could reach if memory traffic cost nothing and the threads
    shared the work perfectly: a full-size rate below 70% of the copy peak is limited by the
    cores' arithmetic wherever this ceiling is too."""
    build, nbytes, shape = w.in_cache
    mode = "quick" if args.quick else "full"
    iters, warmup = CACHE_ITERS[mode]
    res: Dict[str, Any] = {"shape": shape, "bytes": nbytes, "threads": 1}
    try:
        model, inputs = build()
        folder = os.path.join(tmp, f"{w.key}-in-cache")
        from . import dump as fdump
        fdump.dump(model, inputs, folder, name=f"bench-{w.key}-in-cache", seed=0,
                   tolerance=w.tolerance)
        # A ceiling is the best the program does: the fastest median of `--rounds` processes
        # (a stretch of a shared machine that is busy elsewhere only lowers it).
        runs = [fxhlo_times(exe, folder, iters, warmup, 1, args.timeout)
                for _ in range(args.rounds)]
    except Exception as e:
        res["error"] = short_error(e)
        log(f"{w.key}: in-cache run: {res['error']}")
        return res
    data = min(runs, key=lambda d: statistics.median(d["times_ms"]))
    res.update(summary(data["times_ms"]))
    del res["times_ms"]
    res["rounds"] = len(runs)
    res["round_medians_ms"] = sorted(statistics.median(d["times_ms"]) for d in runs)
    res["steps"] = data.get("steps")
    res["gbs_one_thread"] = nbytes / (res["run_ms_median"] * 1e-3) / 1e9
    res["scaled_to_threads"] = args.threads
    res["gbs"] = res["gbs_one_thread"] * args.threads
    return res


def derive(rec: Dict[str, Any]) -> None:
    """Ratios and throughput of fxhlo, from the raw numbers."""
    p = rec["peers"]
    fx = p.get("fxhlo", {}).get("run_ms_median")
    d: Dict[str, Any] = {}
    for peer in ("eager", "inductor", "xla"):
        ms = p.get(peer, {}).get("run_ms_median")
        d[f"{peer}/fxhlo"] = (ms / fx) if (ms is not None and fx) else None
    if fx and rec.get("work"):
        per_s = rec["work"] / (fx * 1e-3)
        d["fxhlo_rate"] = per_s / 1e9   # GFLOP/s or GB/s
    rec["derived"] = d


# ------------------------------------------------------------------------------- table

def fmt_ms(x: Optional[float]) -> str:
    if x is None:
        return "-"
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    return f"{x:.3f}"


def cell_ms(p: Optional[Dict[str, Any]]) -> str:
    if p is None:
        return "-"
    if "error" in p:
        return f"error: {p['error']}"
    s = fmt_ms(p.get("run_ms_median"))
    if str(p.get("check", "ok")).startswith("MISMATCH") and "steps" not in p:
        s += " (MISMATCH)"   # XLA's own output check
    if "iters_reduced_from" in p:
        s += f" ({p['iters']} runs)"
    return s


def cell_ratio(r: Optional[float]) -> str:
    return "-" if r is None else f"{r:.2f}"


def cell_compile(p: Optional[Dict[str, Any]]) -> str:
    if p is None:
        return "-"
    if "error" in p:
        return "err"
    return fmt_ms(p.get("compile_ms"))


def cell_rate(rec: Dict[str, Any], peaks: Dict[str, Any]) -> str:
    rate = rec["derived"].get("fxhlo_rate")
    if rate is None:
        return "-" if rec.get("work") else f"- (no work count: {rec.get('work_error', '?')})"
    if rec["metric"] == "bytes":
        unit, peak = "GB/s", peaks.get("copy_gbs")
    else:
        unit, peak = "GFLOP/s", peaks.get("sgemm_gflops")
    pct = f" ({100 * rate / peak:.0f}%)" if peak else ""
    return f"{rate:.3g} {unit}{pct}"


def cell_steps(p: Optional[Dict[str, Any]]) -> str:
    if not p or "error" in p or "steps" not in p:
        return "-"
    return f"{p['steps']} ({p['fallbacks']})"


def cell_check(p: Optional[Dict[str, Any]]) -> str:
    if p is None:
        return "-"
    if "check" in p:
        return p["check"]
    return f"error: {p['error']}" if "error" in p else "-"


COLUMNS = ["workload", "eager ms", "inductor ms", "XLA ms", "fxhlo ms", "inductor/fxhlo",
           "eager/fxhlo", "XLA/fxhlo", "fxhlo GB/s or GFLOP/s (% of peak)",
           "compile ms inductor / XLA / fxhlo", "fxhlo steps (fallbacks)", "check"]


def table_rows(records: List[Dict[str, Any]], peaks: Dict[str, Any]) -> List[List[str]]:
    rows = []
    for rec in records:
        p = rec["peers"]
        d = rec["derived"]
        rows.append([
            rec["title"], cell_ms(p.get("eager")), cell_ms(p.get("inductor")),
            cell_ms(p.get("xla")), cell_ms(p.get("fxhlo")), cell_ratio(d.get("inductor/fxhlo")),
            cell_ratio(d.get("eager/fxhlo")), cell_ratio(d.get("xla/fxhlo")),
            cell_rate(rec, peaks),
            " / ".join(cell_compile(p.get(k)) for k in ("inductor", "xla", "fxhlo")),
            cell_steps(p.get("fxhlo")), cell_check(p.get("fxhlo")),
        ])
    return rows


def markdown_table(records, peaks) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    for r in table_rows(records, peaks):
        lines.append("| " + " | ".join(c.replace("|", "/") for c in r) + " |")
    return "\n".join(lines)


def targets(records: List[Dict[str, Any]], peaks: Dict[str, Any]) -> List[str]:
    """Issue 5's targets, each marked per workload from this run's numbers."""
    def mark(name, test):
        met, notmet, unknown = [], [], []
        for rec in records:
            try:
                v = test(rec)
            except Exception:
                v = None
            (met if v is True else notmet if v is False else unknown).append(rec["key"])
        parts = [f"met: {', '.join(met) or '-'}", f"NOT met: {', '.join(notmet) or '-'}"]
        if unknown:
            parts.append(f"no data: {', '.join(unknown)}")
        return f"- {name}: " + "; ".join(parts)

    def ratio(peer):
        return lambda r: (None if r["derived"].get(f"{peer}/fxhlo") is None
                          else r["derived"][f"{peer}/fxhlo"] >= 1.0)

    def pct(r):
        rate = r["derived"].get("fxhlo_rate")
        peak = peaks.get("copy_gbs") if r["metric"] == "bytes" else peaks.get("sgemm_gflops")
        if r["key"].startswith("f-"):
            return None   # small testdata models: no throughput target
        return None if (rate is None or not peak) else rate / peak >= 0.7

    def comp(r):
        p = r["peers"]
        fx = p.get("fxhlo", {}).get("compile_ms")
        ind = p.get("inductor", {}).get("compile_ms")
        xl = p.get("xla", {}).get("compile_ms")
        if fx is None or ind is None or xl is None:
            return None
        return fx * 10 <= ind and fx < xl

    def check(r):
        c = r["peers"].get("fxhlo", {}).get("check")
        return None if c is None else c == "ok"

    peak_line = mark(">= 70% of measured peak (c, d by bytes; a, b, e by FLOPs)", pct)
    ceilings = [f"{r['key']} {100 * c:.0f}%" for r in records
                if pct(r) is False and (c := ceiling_of_peak(r, peaks)) is not None]
    if ceilings:
        peak_line += (f" (in-cache ceilings, % of the copy peak: {', '.join(ceilings)}; "
                      "see the notes)")
    return [mark("faster than Inductor (inductor/fxhlo >= 1)", ratio("inductor")),
            mark("faster than eager", ratio("eager")),
            mark("faster than XLA", ratio("xla")),
            peak_line,
            mark("compile >= 10x below Inductor's first call and below XLA's", comp),
            mark("matches eager (fxhlo check)", check)]


def ceiling_of_peak(rec: Dict[str, Any], peaks: Dict[str, Any]) -> Optional[float]:
    """A workload's in-cache ceiling (see `in_cache_ceiling`) as a fraction of the copy peak."""
    c = rec.get("in_cache") or {}
    peak = peaks.get("copy_gbs")
    return c["gbs"] / peak if ("gbs" in c and peak) else None


def ceiling_lines(records: List[Dict[str, Any]], peaks: Dict[str, Any]) -> List[str]:
    """One line per in-cache run (see `in_cache_ceiling`)."""
    lines = []
    for rec in records:
        c = rec.get("in_cache")
        if not c:
            continue
        if "error" in c:
            lines.append(f"- {rec['key']}: in-cache run ({c['shape']}): error: {c['error']}")
            continue
        frac = ceiling_of_peak(rec, peaks)
        of_peak = f", {100 * frac:.0f}% of the copy peak" if frac is not None else ""
        lines.append(
            f"- {rec['key']}: arithmetic ceiling: the same program on {c['shape']} (in cache) "
            f"runs at {c['gbs_one_thread']:.1f} GB/s on one thread "
            f"({fmt_ms(c['run_ms_median'])} ms, the fastest of {c['rounds']} medians of "
            f"{c['iters']} runs); {c['scaled_to_threads']} threads sharing it perfectly would "
            f"reach {c['gbs']:.1f} GB/s{of_peak}, the most a full-size run can reach when "
            f"memory traffic costs nothing")
    return lines


def fallback_lines(records: List[Dict[str, Any]]) -> List[str]:
    """One line per workload with fallbacks: their reasons, counted."""
    lines = []
    for rec in records:
        stats = rec["peers"].get("fxhlo", {}).get("check_stats") or ""
        reasons: Dict[str, int] = {}
        for l in stats.splitlines():
            l = l.strip()
            if l.startswith("fallback ") and ":" in l:
                head, why = l[len("fallback "):].split(":", 1)
                # the group's first node, numbering dropped: "view_12 (2 nodes)" -> "view"
                group = head.split(" (")[0].rstrip("0123456789").rstrip("_")
                why = why.strip()
                # "node 40 'x' (aten.view.default): the result is i64, ..." -> keep the op
                if why.startswith("node ") and "(" in why and "):" in why:
                    op = why[why.index("(") + 1: why.index("):")]
                    why = f"{op}: {why.split('):', 1)[1].strip()}"
                why = f"[{group}] {why}"
                reasons[why] = reasons.get(why, 0) + 1
        if reasons:
            parts = [f"{n}x {w}" for w, n in sorted(reasons.items(), key=lambda x: -x[1])]
            lines.append(f"  - {rec['key']}: " + "; ".join(parts))
    return lines


def report(result: Dict[str, Any]) -> str:
    peaks = result["peaks"]
    out = [f"# fxhlo benchmark{' (--quick: tiny shapes, not a measurement)' if result['quick'] else ''}",
           "", markdown_table(result["workloads"], peaks), ""]

    def peak_line(kind, unit, key):
        parts = []
        for k, v in peaks.get(kind, {}).items():
            parts.append(f"{k} {v[key]:.1f}" if key in v else f"{k} error: {v.get('error')}")
        return ", ".join(parts) + f" {unit}"

    n = peaks.get("gemm_n")
    cb = peaks.get("copy_gbs")
    sg = peaks.get("sgemm_gflops")
    out += [
        f"- machine peaks (this run): copy {cb:.1f} GB/s (best of: {peak_line('copy', 'GB/s', 'gbs')}; "
        "read+write bytes)" if cb else
        f"- machine peaks: copy bandwidth not measured ({peak_line('copy', 'GB/s', 'gbs')})",
        f"- sgemm {n}x{n}x{n} f32: {sg:.1f} GFLOP/s (best of: {peak_line('sgemm', 'GFLOP/s', 'gflops')})"
        if sg else f"- sgemm not measured ({peak_line('sgemm', 'GFLOP/s', 'gflops')})",
        f"- threads: {result['threads']} for every peer ({result['thread_settings']})",
        f"- timing: median of {result['iters']} timed calls per peer, in "
        f"{len(round_sizes(result['iters'], result.get('rounds', 1)))} rounds in which the peers "
        f"take turns (rotating order), {result['warmup']} warmup calls before each round; "
        f"ratios are peer ms / fxhlo ms (> 1: fxhlo faster)",
        f"- versions: {result['versions_line']}",
        f"- machine: {result['machine']['cpu']}, {result['machine']['cores']} cores visible, "
        f"load average {result['machine']['load_start']} at start, "
        f"{result['machine'].get('load_end', '?')} at end",
        f"- command: `{result['command']}`",
        "",
        "Targets (issue 5), from this run:",
    ]
    out += targets(result["workloads"], peaks)
    notes = []
    for rec in result["workloads"]:
        fx = rec["peers"].get("fxhlo", {})
        if "iters_reduced_from" in fx:
            notes.append(f"- {rec['key']}: fxhlo timed over {fx['iters']} runs instead of "
                         f"{fx['iters_reduced_from']} (one run took {fx['check_wall_s']:.1f} s)")
        xl = rec["peers"].get("xla", {})
        if str(xl.get("check", "")).startswith("MISMATCH"):
            notes.append(f"- {rec['key']}: XLA output differs from eager: {xl['check']}")
    if result.get("mha_fastpath", True) and any(r["key"] == "b" for r in result["workloads"]):
        notes.append("- b: under torch.no_grad PyTorch takes the native encoder fast path "
                     "(torch._transformer_encoder_layer_fwd) in eager and inside torch.compile "
                     "(Dynamo captures it as one op that Inductor calls as an extern kernel); "
                     "--no-mha-fastpath makes both run the decomposed layer")
    notes += ceiling_lines(result["workloads"], peaks)
    fb = fallback_lines(result["workloads"])
    if fb:
        notes.append("- fxhlo fallbacks to the reference interpreter (`fxhlo check --stats`), "
                     "by reason:")
        notes += fb
    if notes:
        out += ["", "Notes:"] + notes
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------- setup

def setup_threads(threads: int, xla_flags: str) -> str:
    """Puts the thread count in the environment of every peer; returns what was set."""
    said = []
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "PJRT_NPROC",
                "FXHLO_NUM_THREADS"):
        os.environ[var] = str(threads)
    said.append(f"torch.set_num_threads({threads}); OMP/MKL/OPENBLAS_NUM_THREADS={threads}; "
                f"XLA: PJRT_NPROC={threads}")
    if xla_flags:
        prev = os.environ.get("XLA_FLAGS", "")
        os.environ["XLA_FLAGS"] = (prev + " " + xla_flags).strip()
    said.append(f"XLA_FLAGS='{os.environ.get('XLA_FLAGS', '')}'")
    said.append(f"fxhlo --threads {threads}")
    try:
        cpus = sorted(os.sched_getaffinity(0))
        if threads < len(cpus):
            os.sched_setaffinity(0, cpus[:threads])
            said.append(f"process pinned to CPUs {cpus[:threads]}")
    except (AttributeError, OSError):
        pass
    late = [m for m in ("numpy", "torch", "jax") if m in sys.modules]
    if late:
        said.append(f"warning: {', '.join(late)} imported before the settings")
    return "; ".join(said)


def versions(exe: Optional[str]) -> Tuple[Dict[str, Any], Dict[str, Any]]:
    import numpy
    import torch
    from . import __version__
    v: Dict[str, Any] = {"torch": torch.__version__, "numpy": numpy.__version__,
                         "python": platform.python_version(), "fxhlo_python": __version__}
    try:
        from importlib.metadata import version
        v["jax"] = version("jax")
        v["jaxlib"] = version("jaxlib")
    except Exception:
        v["jax"] = "not installed"
    status: Dict[str, Any] = {}
    if exe:
        try:
            r = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=30)
            v["fxhlo"] = (r.stdout.strip() or r.stderr.strip()) or f"exit {r.returncode}"
            r = subprocess.run([exe, "bench", "--help"], capture_output=True, text=True,
                               timeout=30)
            status["has_bench"] = r.returncode == 0
        except Exception as e:
            v["fxhlo"] = f"error: {short_error(e)}"
        v["fxhlo_bin"] = exe
        try:
            v["fxhlo_bin_mtime"] = time.strftime("%Y-%m-%d %H:%M", time.localtime(
                os.path.getmtime(exe)))
        except OSError:
            pass
    else:
        v["fxhlo"] = "no binary"
    try:
        r = subprocess.run(["git", "-C", str(REPO), "describe", "--always", "--dirty"],
                           capture_output=True, text=True, timeout=30)
        if r.returncode == 0:
            v["git"] = r.stdout.strip()
    except Exception:
        pass
    return v, status


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def loadavg() -> str:
    try:
        return " ".join(f"{x:.1f}" for x in os.getloadavg())
    except OSError:
        return "?"


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m fxhlo.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="tiny shapes and 2 timed calls (a smoke test of the harness)")
    p.add_argument("--only", help="comma-separated workloads: a,b,c,d,e,f (f = f-resnet18,f-gpt2)")
    p.add_argument("--peers", default=",".join(PEERS),
                   help=f"comma-separated peers to run (default: {','.join(PEERS)})")
    p.add_argument("--iters", type=int, help="timed calls per peer (default 20; --quick 2)")
    p.add_argument("--warmup", type=int,
                   help="untimed calls before each round of timed calls (default 3; --quick 1)")
    p.add_argument("--rounds", type=int, default=4,
                   help="rounds the timed calls are split into, the peers taking turns in a "
                        "rotating order (default 4)")
    try:
        ncpu = len(os.sched_getaffinity(0))
    except AttributeError:
        ncpu = os.cpu_count() or 1
    p.add_argument("--threads", type=int, default=ncpu,
                   help=f"threads for every peer (default: all {ncpu} cores)")
    p.add_argument("--timeout", type=float, default=900.0,
                   help="seconds allowed to each subprocess (fxhlo check/bench/lower, XLA "
                        "worker); default 900")
    p.add_argument("--out", help="also write the markdown report to this file")
    p.add_argument("--json", help="write the raw numbers to this file")
    p.add_argument("--png", help="draw the ratios peer ms / fxhlo ms per workload here "
                                 "(default: beside --out, as its name with .png)")
    p.add_argument("--keep-dumps", metavar="DIR",
                   help="write the dumped workload folders under DIR and keep them")
    p.add_argument("--inductor-freezing", action="store_true",
                   help="set torch._inductor.config.freezing (off by default, as in torch)")
    p.add_argument("--inductor-warm-cache", action="store_true",
                   help="use Inductor's usual on-disk cache (default: a fresh one per run, so "
                        "the compile time is a cold compile)")
    p.add_argument("--no-mha-fastpath", action="store_true",
                   help="torch.backends.mha.set_fastpath_enabled(False): eager and Inductor run "
                        "workload b's decomposed layer instead of the native fused encoder op")
    p.add_argument("--xla-flags", default=XLA_FLAGS_DEFAULT,
                   help=f"appended to XLA_FLAGS (default {XLA_FLAGS_DEFAULT!r}; '' for none)")
    p.add_argument("--skip-peaks", action="store_true", help="do not measure machine peaks")
    p.add_argument("--_worker", nargs="+", help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    if a.iters is None:
        a.iters = 2 if a.quick else 20
    if a.warmup is None:
        a.warmup = 1 if a.quick else 3
    if a.threads < 1:
        p.error("--threads must be >= 1")
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    a.peers = [x.strip() for x in a.peers.split(",") if x.strip()]
    bad = [x for x in a.peers if x not in PEERS]
    if bad:
        p.error(f"--peers: unknown {', '.join(bad)} (known: {', '.join(PEERS)})")
    return a


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--_worker" in argv:
        return worker_main(argv[argv.index("--_worker") + 1:])
    args = parse_args(argv)
    t_start = time.time()
    thread_settings = setup_threads(args.threads, args.xla_flags)
    ind_cache = None
    if "inductor" in args.peers and not args.inductor_warm_cache:
        ind_cache = tempfile.mkdtemp(prefix="fxhlo-bench-inductor-")
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = ind_cache
        os.environ["TRITON_CACHE_DIR"] = os.path.join(ind_cache, "triton")
    load_start = loadavg()

    import torch
    torch.set_num_threads(args.threads)
    if args.no_mha_fastpath:
        torch.backends.mha.set_fastpath_enabled(False)
    exe = fxhlo_bin()
    vers, status = versions(exe)
    vline = ", ".join(f"{k} {vers[k]}" for k in ("torch", "jax", "jaxlib", "numpy", "fxhlo", "git")
                      if k in vers)
    if exe:
        vline += f" (binary {exe}, built {vers.get('fxhlo_bin_mtime', '?')}; git describes " \
                 f"the working tree now, not necessarily the binary)"
    command = "python -m fxhlo.bench " + " ".join(shlex.quote(x) for x in argv)
    result: Dict[str, Any] = {
        "command": command.strip(), "argv": argv, "quick": args.quick,
        "threads": args.threads, "thread_settings": thread_settings,
        "iters": args.iters, "warmup": args.warmup, "rounds": args.rounds,
        "peers": args.peers,
        "versions": vers, "versions_line": vline,
        "machine": {"cpu": cpu_name(), "cores": os.cpu_count(), "load_start": load_start,
                    "platform": platform.platform()},
        "inductor_cache": "fresh per run" if ind_cache else "warm (user's)",
        "inductor_freezing": args.inductor_freezing,
        "mha_fastpath": not args.no_mha_fastpath,
        "workloads": [],
    }
    log(f"threads: {thread_settings}")
    log(f"versions: {vline}")
    if args.skip_peaks:
        result["peaks"] = {}
    else:
        log("measuring machine peaks ...")
        try:
            result["peaks"] = measure_peaks(args.quick, args.timeout, "xla" in args.peers,
                                            args.threads, exe)
        except Exception as e:
            result["peaks"] = {"error": short_error(e)}
        log(f"peaks: copy {result['peaks'].get('copy_gbs')} GB/s, "
            f"sgemm {result['peaks'].get('sgemm_gflops')} GFLOP/s")

    wanted = select(args.only)
    try:
        for w in workloads(args.quick):
            if w.key not in wanted:
                continue
            try:
                rec = run_workload(w, args, exe, status)
            except Exception as e:   # a bug in the harness itself: still keep going
                rec = {"key": w.key, "title": w.title, "metric": w.metric, "work": w.work,
                       "peers": {p: {"error": f"harness: {short_error(e)}"} for p in args.peers}}
                derive(rec)
            result["workloads"].append(rec)
            gc.collect()
    finally:
        if ind_cache:
            shutil.rmtree(ind_cache, ignore_errors=True)

    result["machine"]["load_end"] = loadavg()
    result["wall_s"] = time.time() - t_start
    text = report(result)
    print(text, end="")
    if args.out:
        Path(args.out).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1, default=str) + "\n")
    png = args.png or (str(Path(args.out).with_suffix(".png")) if args.out else None)
    if png:
        try:
            ratio_chart(result["workloads"], png)
        except ImportError as e:  # matplotlib is a test dependency, not the package's
            log(f"no chart: {e}")
    return 0


def ratio_chart(records: List[Dict[str, Any]], path: str) -> None:
    """A PNG of each peer's median over fxhlo's per workload (log scale; > 1: fxhlo faster),
    from the records' ``derived`` ratios; a peer that failed on a workload has no bar."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    peers = ("eager", "inductor", "xla")
    keys = [r["key"] for r in records]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(keys) + 2), 4))
    w = 0.8 / len(peers)
    for k, peer in enumerate(peers):
        ys = [r.get("derived", {}).get(f"{peer}/fxhlo") for r in records]
        ax.bar([i + k * w for i in range(len(keys))],
               [y if y is not None else float("nan") for y in ys], w, label=peer)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_yscale("log")
    ax.set_xticks([i + w for i in range(len(keys))], keys)
    ax.set_ylabel("peer ms / fxhlo ms (> 1: fxhlo faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())
