"""Which ATen ops PyTorch's OpInfo samples need that fxhlo's op table lacks, ranked by impact.

For every OpInfo of ``torch.testing._internal.common_methods_invocations.op_db`` that supports
float32 on the CPU, the first samples (``--samples``, default 3) are traced the way the
``torch.compile`` backend traces a graph: ``aot_autograd`` (inference, no gradients) with
``fxhlo.backend.decompositions()``, then ``fxhlo.runner.prepare_graph``.  Every node of the
traced graph is then judged by the backend's own support test (``_Support.why_not``: an op of
``fxhlo._native.supported_ops()`` on an fxjson dtype with static shapes).  Nothing is compiled,
so a full run takes a few minutes.

A sample is *supported* when every node is; otherwise each reason (an op name, or an op name
with the dtype that rules it out, e.g. ``aten.mul.Tensor (torch.complex64)``) blocks it.  The
report ranks the reasons by how many OpInfos and samples they block, and how many samples they
block alone (adding that op would make those samples supported).  Samples whose tracing fails
(data-dependent Python, non-tensor outputs, ...) are counted apart.

    PYTHONPATH=python python tools/missing_ops.py                 # the ranked table
    PYTHONPATH=python python tools/missing_ops.py --json out.json # also every sample's verdict
    PYTHONPATH=python python tools/missing_ops.py --ops cumprod,sort

It also traces the exported-model ops the issue names (``triu_indices``, ``tril_indices``,
``empty_permuted``, ``histc``) as small functions.  Needs ``expecttest`` importable (op_db
imports it); it is not a dependency of fxhlo itself.
"""

from __future__ import annotations

import argparse
import collections
import itertools
import json
import sys
import time
import warnings
from typing import Any, Callable, Dict, List, Optional


def _trace(fn: Callable, tensors: List[Any]) -> list:
    """The inference graphs aot_autograd makes of ``fn(*tensors)`` with fxhlo's decompositions,
    prepared as the backend prepares them."""
    import torch
    from functorch.compile import aot_function
    from fxhlo.backend import decompositions
    from fxhlo.runner import prepare_graph

    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm

    table = decompositions()
    with torch.no_grad():
        try:
            aot_function(fn, fw_compiler=capture, decompositions=table)(*tensors)
        except AssertionError as e:
            if "FakeTensor" not in str(e):
                raise
            # The op makes a real tensor while it is traced (x[[1, 2]], a constant fill
            # value); aot_autograd lifts it with aten.lift_fresh, which the backend's table
            # decomposes to nothing, so the real tensor reaches fake tensor mode.  Trace it
            # without that entry to see which ops it needs (the record says so).
            graphs.clear()
            table = {k: v for k, v in table.items() if k is not torch.ops.aten.lift_fresh.default}
            aot_function(fn, fw_compiler=capture, decompositions=table)(*tensors)
            LIFT_FRESH_RETRIES.append(fn)
    for gm in graphs:
        prepare_graph(gm)
    return graphs


# functions traced only without the backend's aten.lift_fresh decomposition (see _trace)
LIFT_FRESH_RETRIES: List[Callable] = []


def _blockers(graphs) -> List[str]:
    """The backend's reasons for not compiling nodes of ``graphs``, one per distinct reason."""
    from fxhlo import _native
    from fxhlo.backend import _Support

    support = _Support(set(_native.supported_ops()))
    out = []
    for n in (n for gm in graphs for n in gm.graph.nodes):
        r = support.why_not(n)
        # a getitem of an unsupported node is reported under that node's reason
        if r is not None and r != "getitem" and r not in out:
            out.append(r)
    return out


def _sample_call(op, sample):
    """``(fn, tensors)``: the OpInfo call with its tensor leaves as inputs."""
    import torch
    from torch.utils import _pytree as pytree

    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    where = [i for i, x in enumerate(leaves) if isinstance(x, torch.Tensor)]
    tensors = [leaves[i] for i in where]

    def fn(*ts):
        vals = list(leaves)
        for i, t in zip(where, ts):
            vals[i] = t
        inp, args, kwargs = pytree.tree_unflatten(vals, spec)
        return op.op(inp, *args, **kwargs)

    return fn, tensors


def _err(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0][:120] if msg else ''}"


def survey(samples: int, only: Optional[set] = None, verbose: bool = False) -> Dict[str, Any]:
    """Traces the OpInfo samples; returns every sample's verdict (see the module doc)."""
    import torch
    from torch.testing._internal.common_methods_invocations import op_db

    results = []
    for op in op_db:
        if only and op.name not in only:
            continue
        name = op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")
        try:
            if torch.float32 not in op.supported_dtypes("cpu"):
                continue
            gen = op.sample_inputs("cpu", torch.float32, requires_grad=False)
            picked = list(itertools.islice(gen, samples))
        except Exception as e:  # noqa: BLE001 - a broken sample generator is reported
            results.append({"opinfo": name, "sample": 0, "error": "samples: " + _err(e)})
            continue
        for i, s in enumerate(picked):
            rec: Dict[str, Any] = {"opinfo": name, "sample": i}
            try:
                fn, tensors = _sample_call(op, s)
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    graphs = _trace(fn, tensors)
                rec["blocked_by"] = _blockers(graphs)
                if LIFT_FRESH_RETRIES and LIFT_FRESH_RETRIES[-1] is fn:
                    rec["without_lift_fresh"] = True
            except Exception as e:  # noqa: BLE001 - a sample that does not trace is reported
                rec["error"] = _err(e)
            if verbose:
                print(name, i, rec.get("blocked_by", rec.get("error")), file=sys.stderr)
            results.append(rec)
    return {"samples_per_opinfo": samples, "results": results}


def exported_ops() -> Dict[str, List[str]]:
    """Blockers of small functions with the ops real exports contain (issue 35)."""
    import torch

    cases = {
        "triu_indices": (lambda x: x[tuple(torch.triu_indices(4, 4, 1))], [torch.randn(4, 4)]),
        "tril_indices": (lambda x: x[tuple(torch.tril_indices(4, 4))], [torch.randn(4, 4)]),
        "empty_permuted": (lambda x: torch.empty_permuted((2, 3, 4), (0, 2, 1)).fill_(1) + x,
                           [torch.randn(2, 3, 4)]),
        "histc": (lambda x: torch.histc(x, bins=8, min=-2, max=2), [torch.randn(50)]),
    }
    out = {}
    for k, (fn, ts) in cases.items():
        try:
            out[k] = _blockers(_trace(fn, ts))
        except Exception as e:  # noqa: BLE001
            out[k] = [_err(e)]
    return out


def summarize(data: Dict[str, Any]) -> str:
    """The ranked table of blockers."""
    res = data["results"]
    traced = [r for r in res if "blocked_by" in r]
    ok = [r for r in traced if not r["blocked_by"]]
    errors = [r for r in res if "error" in r]
    opinfos = {r["opinfo"] for r in res}
    ok_opinfos = {r["opinfo"] for r in res} - {r["opinfo"] for r in res
                                               if r.get("blocked_by") or "error" in r}
    by_samples = collections.Counter()
    alone = collections.Counter()
    by_opinfo = collections.defaultdict(set)
    for r in traced:
        for b in r["blocked_by"]:
            by_samples[b] += 1
            by_opinfo[b].add(r["opinfo"])
        if len(r["blocked_by"]) == 1:
            alone[r["blocked_by"][0]] += 1
    lines = [
        f"OpInfos with f32 samples: {len(opinfos)}; samples: {len(res)} "
        f"(first {data['samples_per_opinfo']} each)",
        f"supported (every node compilable): {len(ok)}/{len(res)} samples "
        f"({100.0 * len(ok) / max(len(res), 1):.1f}%), {len(ok_opinfos)} OpInfos whole",
        f"blocked by a missing op or dtype: {len(traced) - len(ok)} samples; "
        f"tracing failed: {len(errors)} samples",
        f"traced only without the backend's aten.lift_fresh decomposition (with it, "
        f"aot_autograd fails on a real tensor made while tracing): "
        f"{sum(1 for r in res if r.get('without_lift_fresh'))} samples, of which "
        f"{sum(1 for r in ok if r.get('without_lift_fresh'))} supported",
        f"distinct blockers: {len(by_samples)}",
        "",
        f"{'opinfos':>7} {'samples':>7} {'alone':>5}  blocker (OpInfos)",
    ]
    ranked = sorted(by_samples, key=lambda b: (-len(by_opinfo[b]), -by_samples[b], b))
    for b in ranked:
        names = sorted(by_opinfo[b])
        shown = ", ".join(names[:6]) + (", ..." if len(names) > 6 else "")
        lines.append(f"{len(by_opinfo[b]):7d} {by_samples[b]:7d} {alone[b]:5d}  {b}  ({shown})")
    if errors:
        lines += ["", "tracing failed:"]
        errs = collections.Counter(r["error"] for r in errors)
        for e, n in errs.most_common():
            who = sorted({r["opinfo"] for r in errors if r["error"] == e})
            lines.append(f"{n:5d}  {e}  ({', '.join(who[:6])}{', ...' if len(who) > 6 else ''})")
    return "\n".join(lines)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--samples", type=int, default=3, help="samples per OpInfo (default 3)")
    p.add_argument("--ops", help="comma-separated OpInfo names (default: all)")
    p.add_argument("--json", help="write every sample's verdict here")
    p.add_argument("-v", "--verbose", action="store_true", help="print each sample as traced")
    a = p.parse_args(argv)
    t = time.time()
    data = survey(a.samples, set(a.ops.split(",")) if a.ops else None, a.verbose)
    data["exported"] = exported_ops()
    print(summarize(data))
    print("\nops of real exports (blockers of a small function using each):")
    for k, v in data["exported"].items():
        print(f"  {k}: {', '.join(v) if v else 'supported'}")
    print(f"\n({time.time() - t:.0f} s)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(data, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
