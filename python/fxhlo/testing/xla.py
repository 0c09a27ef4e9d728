"""Check fxhlo's StableHLO with code we did not write: the StableHLO MLIR bindings shipped in
jaxlib parse and verify the module, and XLA (CPU, through jax) executes it.

    from fxhlo.testing import xla
    text = xla.lower("testdata/mlp")                 # runs `fxhlo lower`
    xla.verify(text)                                  # jaxlib's MLIR parser + verifier
    outs = xla.Runner().run(text, [np.ones((4, 32), np.float32)])

The fxhlo binary is found as: ``$FXHLO_BIN``; else ``target/{debug,release}/fxhlo`` in the
repository; else the lowering crate's example ``lower`` (built with cargo if needed).
"""

from __future__ import annotations

import functools
import os
import subprocess
import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Sequence

import numpy as np

REPO = Path(__file__).resolve().parents[3]

# Tolerances per dtype (rtol, atol) used by ``assert_close``; integers and bools are exact.
TOLERANCE = {
    "float32": (1e-4, 1e-5),
    "float64": (1e-7, 1e-9),
    "float16": (1e-2, 1e-3),
    "bfloat16": (2e-2, 1e-2),
}


class LowerFailed(RuntimeError):
    """``fxhlo lower`` refused the graph; the message is the lowering error."""


# ------------------------------------------------------------------------------- fxhlo binary

def _example_bin() -> List[str]:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    exe = target / "debug" / "examples" / "lower"
    if not exe.exists():
        subprocess.run(["cargo", "build", "-q", "-p", "fxhlo-lowering", "--example", "lower"],
                       cwd=REPO, check=True)
    return [str(exe)]


@functools.lru_cache(maxsize=1)
def fxhlo_command() -> List[str]:
    """The command prefix that accepts ``lower MODEL -o OUT [--inline-constants]``."""
    env = os.environ.get("FXHLO_BIN")
    if env:
        return [env]
    for kind in ("debug", "release"):
        exe = REPO / "target" / kind / "fxhlo"
        if exe.exists():
            # use it only if it knows the `lower` verb
            r = subprocess.run([str(exe), "lower", "--help"], capture_output=True, text=True)
            if r.returncode == 0:
                return [str(exe)]
    return _example_bin()


def lower(model_path, out_path=None, inline_constants: bool = False) -> str:
    """Lowers a fxjson model (file or testdata folder) and returns the MLIR text."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(out_path) if out_path else Path(tmp) / "model.mlir"
        cmd = fxhlo_command() + ["lower", str(model_path), "-o", str(out)]
        if inline_constants:
            cmd.append("--inline-constants")
        r = subprocess.run(cmd, capture_output=True, text=True)
        if r.returncode != 0:
            raise LowerFailed((r.stderr or r.stdout).strip())
        return out.read_text()


# ------------------------------------------------------------------------------- MLIR / XLA

@functools.lru_cache(maxsize=1)
def _jax():
    import jax
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_platforms", "cpu")
    import jax.extend  # noqa: F401
    return jax


@functools.lru_cache(maxsize=1)
def _context():
    _jax()
    from jax._src.interpreters import mlir as jmlir
    return jmlir.make_ir_context()


def verify(text: str):
    """Parses ``text`` with jaxlib's MLIR (StableHLO and CHLO registered) and verifies it.

    Returns the module; raises ``ValueError`` naming the problem.
    """
    from jaxlib.mlir import ir
    ctx = _context()
    with ctx:
        try:
            m = ir.Module.parse(text)
        except Exception as e:  # MLIRError
            raise ValueError(f"StableHLO does not parse: {e}") from None
        if not m.operation.verify():
            raise ValueError("StableHLO module does not verify")
    return m


class Runner:
    """Compiles and runs StableHLO text with XLA on CPU, reusing one backend."""

    def __init__(self):
        jax = _jax()
        self.jax = jax
        self.backend = jax.extend.backend.get_backend("cpu")
        self.devices = self.backend.devices()[:1]
        from jax._src.lib import xla_client
        self.device_list = xla_client.DeviceList(tuple(self.devices))

    def compile(self, text: str):
        verify(text)
        return self.backend.compile_and_load(text, self.device_list)

    def run(self, text: str, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
        exe = self.compile(text)
        return self.execute(exe, inputs)

    def execute(self, exe, inputs: Sequence[np.ndarray]) -> List[np.ndarray]:
        args = [self.jax.device_put(np.asarray(x), self.devices[0]) for x in inputs]
        outs = exe.execute(args)
        return [np.asarray(o) for o in outs]


# ------------------------------------------------------------------------------- torch <-> numpy

def to_numpy(t) -> np.ndarray:
    """A torch tensor as numpy (bfloat16 through ml_dtypes)."""
    import torch
    t = t.detach().contiguous().cpu()
    if t.dtype == torch.bfloat16:
        import ml_dtypes
        return t.view(torch.int16).numpy().view(ml_dtypes.bfloat16)
    return t.numpy()


def dtype_name(a: np.ndarray) -> str:
    return str(a.dtype)


def assert_close(got: np.ndarray, want: np.ndarray, what: str = "output",
                 tol: Optional[Dict[str, tuple]] = None):
    """Compares one output: same dtype and shape; floats within the dtype's tolerance
    (``|got - want| <= atol + rtol * |want|``, NaN equal to NaN), others exactly."""
    tol = tol or TOLERANCE
    if got.shape != want.shape:
        raise AssertionError(f"{what}: shape {got.shape}, expected {want.shape}")
    if str(got.dtype) != str(want.dtype):
        raise AssertionError(f"{what}: dtype {got.dtype}, expected {want.dtype}")
    name = str(want.dtype)
    if name in tol:
        rtol, atol = tol[name]
        g = got.astype(np.float64)
        w = want.astype(np.float64)
        bad = ~(np.isclose(g, w, rtol=rtol, atol=atol, equal_nan=True))
        if bad.any():
            i = np.argwhere(bad)[0]
            err = np.nanmax(np.abs(g - w)[bad]) if bad.any() else 0
            raise AssertionError(f"{what} ({name}): {bad.sum()} of {bad.size} elements differ, "
                                 f"max abs err {err:g}; first at {tuple(i)}: got {g[tuple(i)]}, "
                                 f"expected {w[tuple(i)]} (rtol {rtol}, atol {atol})")
    elif not np.array_equal(got, want):
        bad = got != want
        i = np.argwhere(bad)[0] if bad.ndim else ()
        raise AssertionError(f"{what} ({name}): {bad.sum()} elements differ; first at "
                             f"{tuple(i)}: got {got[tuple(i)]}, expected {want[tuple(i)]}")


def load_testdata(folder) -> tuple:
    """(graph inputs in order as numpy, expected outputs as numpy, tolerance) of a testdata folder."""
    import json
    from safetensors.torch import load_file
    folder = Path(folder)
    g = json.loads((folder / "graph.json").read_text())
    ins = load_file(str(folder / "inputs.safetensors"))
    exp = load_file(str(folder / "expected.safetensors"))
    meta = json.loads((folder / "meta.json").read_text())
    users = [i["name"] for i in g["inputs"] if i["kind"] == "user_input"]
    weights = load_file(str(folder / g["weights"])) if g.get("weights") else {}
    wins = [weights[i["target"]] for i in g["inputs"] if i["kind"] != "user_input"]
    inputs = [to_numpy(ins[n]) for n in users]
    winputs = [to_numpy(w) for w in wins]
    expected = [to_numpy(exp[f"output{i}"]) for i in range(len(exp))]
    return inputs, winputs, expected, meta.get("tolerance")


def check_testdata(folder, runner: Optional[Runner] = None, inline_constants: bool = False):
    """Lowers a testdata folder, runs it with XLA and compares with the stored eager outputs."""
    runner = runner or Runner()
    text = lower(folder, inline_constants=inline_constants)
    inputs, weights, expected, tol = load_testdata(folder)
    args = inputs if inline_constants else inputs + weights
    outs = runner.run(text, args)
    if len(outs) != len(expected):
        raise AssertionError(f"{len(outs)} outputs, expected {len(expected)}")
    t = dict(TOLERANCE)
    if tol:
        for k in ("float32", "float64"):
            t[k] = (max(tol["rtol"], t[k][0]), max(tol["atol"], t[k][1]))
    for i, (a, b) in enumerate(zip(outs, expected)):
        assert_close(a, b, f"{Path(folder).name} output {i}", t)
    return text
