"""Scale benchmark: time and peak memory of `fxhlo inspect`, `compile -O2` and `run` on
generated graphs of 10k, 100k and 1M nodes (a benchmark, not a timed test).

Two graph shapes, written as IR text (`fxhlo` reads it as a model without weights):
  chain   one long elementwise chain: exp, tanh, sigmoid, neg, `* 0.5`, `+ x` in turn
          (every node reads the one before, the `+ x` also the input), the deepest graph
  ladder  a DAG where each node reads the two before it (add/mul/sub/maximum, tanh between),
          so every value has two readers: a wide fan of live values for CSE and fusion
Usage (from the repo root, after `cargo build --release`):
    python3 tools/scale_bench.py [--sizes 10000,100000,1000000] [--shapes chain,ladder]
        [--exe target/release/fxhlo] [--timeout 600] [--json out.json]
Prints a markdown table: graph, nodes, verb, seconds, peak RSS (MiB), exit code.
Needs only the standard library; peak RSS is the child's ru_maxrss (resource.getrusage).
"""
import argparse
import json
import os
import resource
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SHAPE = [4, 8]


def ty():
    return "f32[%s]" % ", ".join(map(str, SHAPE))


def chain(n):
    t = ty()
    lines = ["graph {", f"  %x: {t} = input"]
    prev = "x"
    ops = [
        "aten.exp.default(%{p})",
        "aten.tanh.default(%{p})",
        "aten.sigmoid.default(%{p})",
        "aten.neg.default(%{p})",
        "aten.mul.Scalar(%{p}, other=0.5)",
        "aten.add.Tensor(%{p}, %x)",
    ]
    for i in range(n):
        name = f"v{i}"
        lines.append(f"  %{name}: {t} = " + ops[i % len(ops)].format(p=prev))
        prev = name
    lines += [f"  return %{prev}", "}"]
    return "\n".join(lines) + "\n"


def ladder(n):
    t = ty()
    lines = ["graph {", f"  %x: {t} = input", f"  %y: {t} = aten.tanh.default(%x)"]
    a, b = "x", "y"
    ops = ["add.Tensor", "mul.Tensor", "sub.Tensor", "maximum.default"]
    for i in range(n):
        name = f"v{i}"
        if i % 5 == 4:
            lines.append(f"  %{name}: {t} = aten.tanh.default(%{b})")
        else:
            lines.append(f"  %{name}: {t} = aten.{ops[i % 4]}(%{b}, %{a})")
        a, b = b, name
    lines += [f"  return %{b}", "}"]
    return "\n".join(lines) + "\n"


def inputs_bytes():
    n = SHAPE[0] * SHAPE[1]
    raw = struct.pack("<%df" % n, *[0.01 * (i % 7) for i in range(n)])
    h = json.dumps({"x": {"dtype": "F32", "shape": SHAPE, "data_offsets": [0, len(raw)]}}).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + raw


def timed(cmd, timeout):
    """Runs `cmd`; (seconds, peak RSS MiB of the child, exit code or 'timeout')."""
    env = dict(os.environ, FXHLO_NUM_THREADS=os.environ.get("FXHLO_NUM_THREADS", "1"))
    t = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        _, err = p.communicate(timeout=timeout)
        code = p.returncode
    except subprocess.TimeoutExpired:
        p.kill()
        _, err = p.communicate()
        code = "timeout"
    secs = time.perf_counter() - t
    # Without /usr/bin/time: RUSAGE_CHILDREN's maximum over every child so far (the sizes
    # run smallest first, so it is this run's unless an earlier run was larger).
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    if code not in (0,):
        sys.stderr.write(f"{' '.join(map(str, cmd))}: exit {code}: {err.decode(errors='replace')[:300]}\n")
    return secs, rss, code


def timed_rss(cmd, timeout):
    """Like `timed`, with the child's own peak RSS from /usr/bin/time -v when present."""
    if os.path.exists("/usr/bin/time"):
        with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
            secs, _, code = timed(["/usr/bin/time", "-v", "-o", tf.name, *cmd], timeout)
            rss = None
            for line in Path(tf.name).read_text().splitlines():
                if "Maximum resident set size" in line:
                    rss = int(line.split(":")[1]) / 1024
                if "Exit status" in line and code != "timeout":
                    code = int(line.split(":")[1])
            return secs, rss, code
    return timed(cmd, timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="10000,100000,1000000")
    ap.add_argument("--shapes", default="chain,ladder")
    ap.add_argument("--verbs", default="inspect,compile,run")
    ap.add_argument("--exe", default=str(ROOT / "target" / "release" / "fxhlo"))
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--json")
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory(prefix="fxhlo-scale-") as d:
        d = Path(d)
        (d / "inputs.safetensors").write_bytes(inputs_bytes())
        print("| graph | nodes | verb | seconds | peak RSS MiB | exit |")
        print("|---|---:|---|---:|---:|---|")
        for shape in a.shapes.split(","):
            for n in map(int, a.sizes.split(",")):
                model = d / f"{shape}{n}.fxir"
                model.write_text({"chain": chain, "ladder": ladder}[shape](n))
                art = d / f"{shape}{n}.fxa"
                for verb in a.verbs.split(","):
                    cmd = {
                        "inspect": [a.exe, "inspect", str(model), "--histogram-only"],
                        "compile": [a.exe, "compile", str(model), "-O2", "-o", str(art)],
                        "run": [a.exe, "run", str(art) if art.exists() else str(model),
                                "--inputs", str(d / "inputs.safetensors"),
                                "--out", str(d / "out.safetensors"), "--threads", "1"],
                    }[verb]
                    secs, rss, code = timed_rss(cmd, a.timeout)
                    rss_s = "?" if rss is None else f"{rss:.0f}"
                    print(f"| {shape} | {n} | {verb} | {secs:.2f} | {rss_s} | {code} |", flush=True)
                    rows.append(dict(graph=shape, nodes=n, verb=verb, seconds=secs, rss_mib=rss, exit=code))
                art.unlink(missing_ok=True)
                model.unlink()
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
