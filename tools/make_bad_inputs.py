"""Writes the bad-input corpus tests/bad_inputs/: one folder per case, each with the broken files
and an expect.json listing CLI runs with their expected exit code and message substring.

Cases start from testdata/mlp (fxjson and .pt2) and break one thing each. Run from the repo root:
    python tools/make_bad_inputs.py
Needs only the standard library (safetensors files are written by hand).
"""
import json
import os
import re
import shutil
import struct
import zipfile
import zlib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SRC = ROOT / "testdata" / "mlp"
OUT = ROOT / "tests" / "bad_inputs"


def st_bytes(tensors):
    """Minimal safetensors writer: {name: (dtype, shape, raw bytes)}."""
    header, off, blobs = {}, 0, []
    for k in sorted(tensors):
        dt, shape, raw = tensors[k]
        header[k] = {"dtype": dt, "shape": shape, "data_offsets": [off, off + len(raw)]}
        off += len(raw)
        blobs.append(raw)
    h = json.dumps(header, separators=(",", ":")).encode()
    h += b" " * ((8 - len(h) % 8) % 8)
    return struct.pack("<Q", len(h)) + h + b"".join(blobs)


def f32(vals):
    return struct.pack("<%df" % len(vals), *vals)


def graph():
    return json.loads((SRC / "graph.json").read_text())


def case(name, runs, files=None, graph_doc=None, copy=("weights.safetensors", "inputs.safetensors"),
         setup=None):
    """setup: {"fifo": [names], "symlink": {name: target}}, made by the test before the runs
    (git cannot hold a FIFO, and copying a link to /dev/zero would never end)."""
    d = OUT / name
    d.mkdir(parents=True)
    for f in copy:
        shutil.copy(SRC / f, d / f)
    if graph_doc is not None:
        text = graph_doc if isinstance(graph_doc, (str, bytes)) else json.dumps(graph_doc, indent=1)
        (d / "graph.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    for fname, data in (files or {}).items():
        (d / fname).write_bytes(data)
    doc = {"runs": runs}
    if setup:
        doc["setup"] = setup
    (d / "expect.json").write_text(json.dumps(doc, indent=1) + "\n")


def r(args, exit, stderr=None, stdout=None, **extra):
    """extra: stdout_file (stdout redirected to that file, e.g. /dev/full), close_stdout (the
    reader closes stdout at once), max_stderr (bytes)."""
    run = {"args": args, "exit": exit, **extra}
    if stderr is not None:
        run["stderr"] = stderr
    if stdout is not None:
        run["stdout"] = stdout
    return run


def inspect_fails(msg, model="graph.json"):
    return [r(["inspect", model], 2, msg), r(["run", model, "--inputs", "inputs.safetensors", "--out", "out.safetensors"], 2, msg), r(["lower", model, "-o", "out.mlir"], 2, msg)]


def node(g, op):
    return next(n for n in g["nodes"] if n["op"] == op)


def main():
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir(parents=True)
    text = (SRC / "graph.json").read_text()

    # --- malformed files
    case("truncated_json", inspect_fails("invalid JSON"), graph_doc=text[: len(text) // 2])
    case("not_json", inspect_fails("neither a fxjson graph"), graph_doc=b"\x00\x01garbage")
    case("empty_file", inspect_fails("neither a fxjson graph"), graph_doc="")
    case("json_array", inspect_fails("neither a fxjson graph"), graph_doc="[1, 2, 3]")
    g = graph(); g["format"] = "onnx"
    case("wrong_format", inspect_fails("'onnx' is not 'fxhlo-graph'"), graph_doc=g)
    g = graph(); g["version"] = 99
    case("future_version", inspect_fails("schema version 99 is not supported"), graph_doc=g)
    g = graph(); del g["version"]
    case("missing_version", inspect_fails("missing field `version`"), graph_doc=g)
    g = graph(); g["nodes"][0]["args"]["self"] = {"tensor": "p_fc1_weight", "int": 3}
    case("arg_two_keys", inspect_fails("exactly one key"), graph_doc=g)
    g = graph(); g["inputs"][-1]["type"]["dtype"] = "complex64"
    case("unknown_dtype", inspect_fails("unknown dtype 'complex64'"), graph_doc=g)
    g = graph(); g["nodes"][0]["args"]["self"] = {"blob": "x"}
    case("unknown_arg_kind", inspect_fails("unknown argument kind 'blob'"), graph_doc=g)

    # --- ops and references
    g = graph(); n = node(g, "aten.gelu.default"); n["op"] = "aten.frobnicate.default"
    case("unknown_op", [
        r(["inspect", "graph.json"], 0, stdout="not in the op table (1): aten.frobnicate.default"),
        r(["run", "graph.json", "--inputs", "inputs.safetensors", "--out", "out.safetensors"], 2, "aten.frobnicate.default"),
        r(["lower", "graph.json", "-o", "out.mlir"], 2, "aten.frobnicate.default"),
    ], graph_doc=g)
    g = graph(); n = node(g, "aten.gelu.default"); n["op"] = "aten.gelu.Frobnicate"
    case("unknown_overload", [r(["inspect", "graph.json"], 0, stdout="aten.gelu.Frobnicate")], graph_doc=g)
    g = graph(); node(g, "aten.addmm.default")["args"]["mat1"] = {"tensor": "nope"}
    case("dangling_reference", inspect_fails("unknown value 'nope'"), graph_doc=g)
    g = graph(); g["nodes"][1]["results"][0]["name"] = g["nodes"][0]["results"][0]["name"]
    case("duplicate_value_name", inspect_fails("defined twice"), graph_doc=g)
    g = graph(); g["nodes"][0]["args"]["self"] = {"tensor": g["nodes"][-1]["results"][0]["name"]}
    case("cycle", inspect_fails("not defined by an earlier input or node"), graph_doc=g)
    g = graph(); del node(g, "aten.addmm.default")["args"]["mat2"]
    case("missing_argument", inspect_fails("missing required argument `mat2`"), graph_doc=g)
    g = graph(); node(g, "aten.gelu.default")["args"]["frob"] = {"int": 1}
    case("unknown_argument", inspect_fails("unknown argument `frob`"), graph_doc=g)
    g = graph(); node(g, "aten.permute.default")["args"]["dims"] = {"float": 1.0}
    case("attribute_wrong_type", inspect_fails("argument `dims` is float, expected an int list"), graph_doc=g)
    g = graph(); node(g, "aten.gelu.default")["args"]["approximate"] = {"int": 3}
    case("attribute_wrong_type_str", inspect_fails("argument `approximate` is int, expected a string"), graph_doc=g)
    g = graph(); node(g, "aten.permute.default")["args"]["dims"] = {"ints": [1, 1]}
    case("bad_permutation", inspect_fails("repeats dimension 1"), graph_doc=g)
    g = graph(); x = next(i for i in g["inputs"] if i["kind"] == "user_input"); x["type"]["shape"] = [4, 31]
    case("operand_shape_mismatch", inspect_fails("aten.addmm.default): mat2 has shape"), graph_doc=g)
    g = graph(); x = next(i for i in g["inputs"] if i["kind"] == "user_input"); x["type"]["dtype"] = "i64"
    case("operand_dtype_mismatch", inspect_fails("operands have dtypes"), graph_doc=g)
    g = graph(); node(g, "aten.gelu.default")["results"][0]["type"]["shape"] = [4, 7]
    case("declared_type_mismatch", inspect_fails("declared result type f32[4, 7]"), graph_doc=g)
    g = graph(); g["outputs"] = []
    case("no_outputs", inspect_fails("the graph has no outputs"), graph_doc=g)
    g = graph(); g["outputs"] = ["nothing"]
    case("unknown_output", inspect_fails("unknown value 'nothing'"), graph_doc=g)

    # --- sizes
    g = graph(); x = next(i for i in g["inputs"] if i["kind"] == "user_input"); x["type"]["shape"] = [4, -32]
    case("negative_dim", inspect_fails("invalid dimension -32"), graph_doc=g)
    g = graph(); x = next(i for i in g["inputs"] if i["kind"] == "user_input"); x["type"]["shape"] = [4294967296, 4294967296, 4]
    case("overflowing_dims", inspect_fails("more elements than fit in i64"), graph_doc=g)
    huge = {"format": "fxhlo-graph", "version": 1, "inputs": [], "nodes": [
        {"name": "full", "op": "aten.full.default", "args": {"size": {"ints": [1000000, 1000000]}, "fill_value": {"float": 1.0}},
         "results": [{"name": "full", "type": {"dtype": "f32", "shape": [1000000, 1000000]}}]}], "outputs": ["full"]}
    case("tensor_1e12_elements", [
        r(["inspect", "graph.json"], 0, stdout="aten.full.default"),
        r(["run", "graph.json", "--inputs", "empty.safetensors", "--out", "out.safetensors"], 2, "full"),
    ], graph_doc=huge, copy=(), files={"empty.safetensors": st_bytes({})})

    # --- weights
    case("weights_file_missing", inspect_fails("weights.safetensors"), graph_doc=text, copy=("inputs.safetensors",))
    w = (SRC / "weights.safetensors").read_bytes()
    case("weights_truncated", inspect_fails("not a valid safetensors file"), graph_doc=text, copy=("inputs.safetensors",),
         files={"weights.safetensors": w[: len(w) // 2]})
    case("weight_wrong_shape", inspect_fails("weight 'fc3.bias': has f32[3]"), graph_doc=text, copy=("inputs.safetensors",),
         files={"weights.safetensors": patched_weights({"fc3.bias": ("F32", [3], f32([0.0] * 3))})})
    case("weight_wrong_dtype", inspect_fails("weight 'fc3.bias': has f64[10]"), graph_doc=text, copy=("inputs.safetensors",),
         files={"weights.safetensors": patched_weights({"fc3.bias": ("F64", [10], b"\0" * 80)})})
    case("weight_missing", inspect_fails("weight 'fc3.bias': missing"), graph_doc=text, copy=("inputs.safetensors",),
         files={"weights.safetensors": patched_weights({"fc3.bias": None})})

    # --- run-time inputs
    run = ["run", "graph.json", "--inputs", "in.safetensors", "--out", "out.safetensors"]
    case("input_missing", [r(run, 2, "missing input 'x'")], graph_doc=text, copy=("weights.safetensors",),
         files={"in.safetensors": st_bytes({})})
    case("input_wrong_shape", [r(run, 2, "input 'x' has shape [4, 16]")], graph_doc=text, copy=("weights.safetensors",),
         files={"in.safetensors": st_bytes({"x": ("F32", [4, 16], f32([0.0] * 64))})})
    case("input_wrong_dtype", [r(run, 2, "input 'x'")], graph_doc=text, copy=("weights.safetensors",),
         files={"in.safetensors": st_bytes({"x": ("F64", [4, 32], b"\0" * (8 * 128))})})
    case("input_extra", [r(run, 2, "unexpected input 'y'")], graph_doc=text, copy=("weights.safetensors",),
         files={"in.safetensors": st_bytes({"x": ("F32", [4, 32], f32([0.0] * 128)), "y": ("F32", [1], f32([0.0]))})})
    case("inputs_file_truncated", [r(run, 2, "not a valid safetensors file")], graph_doc=text, copy=("weights.safetensors",),
         files={"in.safetensors": (SRC / "inputs.safetensors").read_bytes()[:40]})
    nan_graph = {"format": "fxhlo-graph", "version": 1,
                 "inputs": [{"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [4]}}],
                 "nodes": [{"name": "relu", "op": "aten.relu.default", "args": {"self": {"tensor": "x"}},
                            "results": [{"name": "relu", "type": {"dtype": "f32", "shape": [4]}}]}],
                 "outputs": ["relu"]}
    inf = float("inf")
    case("nan_inf_inputs_computed", [r(["check", "."], 0, stdout="ok")], graph_doc=nan_graph, copy=(), files={
        "inputs.safetensors": st_bytes({"x": ("F32", [4], f32([float("nan"), inf, -inf, -1.0]))}),
        "expected.safetensors": st_bytes({"output0": ("F32", [4], f32([float("nan"), inf, 0.0, 0.0]))})})
    case("check_out_of_tolerance", [r(["check", "."], 1, stdout="FAIL")], graph_doc=nan_graph, copy=(), files={
        "inputs.safetensors": st_bytes({"x": ("F32", [4], f32([1.0, 2.0, 3.0, 4.0]))}),
        "expected.safetensors": st_bytes({"output0": ("F32", [4], f32([1.0, 2.0, 3.0, 4.1]))})})
    case("check_wrong_output_shape", [r(["check", "."], 1, stdout="expected f32[3]")], graph_doc=nan_graph, copy=(), files={
        "inputs.safetensors": st_bytes({"x": ("F32", [4], f32([1.0, 2.0, 3.0, 4.0]))}),
        "expected.safetensors": st_bytes({"output0": ("F32", [3], f32([1.0, 2.0, 3.0]))})})

    # --- .pt2 archives
    pt2 = (SRC / "model.pt2").read_bytes()
    def pt2_case(name, msg, mutate=None, data=None, inspect_exit=2, out_stream="stderr"):
        if data is None:
            data = rewrite_zip(pt2, mutate)
        run_ = r(["inspect", "model.pt2"], inspect_exit, **{out_stream: msg})
        case(name, [run_], copy=(), files={"model.pt2": data})
    pt2_case("pt2_truncated", "not a readable .pt2", data=pt2[: len(pt2) // 3])
    pt2_case("pt2_missing_model_json", "no models/*.json member", lambda n, b: None if n.endswith("models/model.json") else b)
    pt2_case("pt2_missing_weight", "weight_0", lambda n, b: None if n.endswith("data/weights/weight_0") else b)
    pt2_case("pt2_truncated_weight", "bytes of storage", lambda n, b: b[:100] if n.endswith("data/weights/weight_0") else b)
    pt2_case("pt2_future_schema", "schema version 99 is not supported", lambda n, b: edit_json(b, lambda d: d["schema_version"].update(major=99)) if n.endswith("models/model.json") else b)
    def dtype_edit(d):
        d["config"]["fc1.weight"]["tensor_meta"]["dtype"] = 8  # f64: 2x the bytes the file has
    pt2_case("pt2_weight_config_dtype", "bytes of storage", lambda n, b: edit_json(b, dtype_edit) if n.endswith("model_weights_config.json") else b)
    def offset_edit(d):
        d["config"]["fc1.bias"]["tensor_meta"]["storage_offset"] = {"as_int": 1000}
    pt2_case("pt2_weight_config_offset", "bytes of storage", lambda n, b: edit_json(b, offset_edit) if n.endswith("model_weights_config.json") else b)
    def shape_edit(d):
        d["config"]["fc1.bias"]["tensor_meta"]["sizes"] = [{"as_int": 8}]
        d["config"]["fc1.bias"]["tensor_meta"]["strides"] = [{"as_int": 1}]
    pt2_case("pt2_weight_config_shape", "weight 'fc1.bias': has f32[8]", lambda n, b: edit_json(b, shape_edit) if n.endswith("model_weights_config.json") else b)
    def op_edit(d):
        d["graph_module"]["graph"]["nodes"][1]["target"] = "torch.ops.aten.frobnicate.default"
    pt2_case("pt2_unknown_op", "aten.frobnicate.default", lambda n, b: edit_json(b, op_edit) if n.endswith("models/model.json") else b,
             inspect_exit=0, out_stream="stdout")

    # Compiled artifacts (docs/runtime.md): built by hand so that no compiler is needed here.
    # The version this build reads (so that only the case under test is wrong).
    src = (ROOT / "runtime/src/fast/artifact.rs").read_text()
    current = int(re.search(r"pub const FORMAT_VERSION: u32 = (\d+);", src).group(1))

    def artifact(header: bytes, consts: bytes = b"", version: int = current, crc_fix: bool = True):
        body = b"FXHLOFXA" + struct.pack("<I", version) + struct.pack("<Q", len(header)) + header
        body += struct.pack("<Q", len(consts)) + consts
        crc = zlib.crc32(body) if crc_fix else zlib.crc32(body) ^ 1
        return body + struct.pack("<I", crc)
    empty_st = st_bytes({})

    def artifact_case(name, data, msg):
        run = r(["run", "model.fxa", "--inputs", "inputs.safetensors", "--out", "out.safetensors"], 2, msg)
        case(name, [run], files={"model.fxa": data}, copy=("inputs.safetensors",))
    artifact_case("artifact_wrong_version", artifact(b"{}", empty_st, version=99), "format version 99")
    artifact_case("artifact_truncated", artifact(b'{"compiler_version": "0.1.0"}', empty_st)[:30], "truncated")
    artifact_case("artifact_corrupted", artifact(b'{"compiler_version": "0.1.0"}', empty_st, crc_fix=False), "checksum mismatch")
    artifact_case("artifact_bad_header", artifact(b'{"compiler_version": "0.1.0"}', empty_st), "header: missing field")
    bad_prog = json.dumps({"compiler_version": "0.1.0", "opt_level": 2, "graph": "", "stablehlo": {"Err": "-"},
                           "program": {"values": [], "inputs": [3], "constants": [], "outputs": [], "steps": []}}).encode()
    artifact_case("artifact_dangling_value", artifact(bad_prog, empty_st), "refers to value 3")
    reliability_cases(artifact, empty_st)
    program_text_cases(empty_st)
    print(f"wrote {len(list(OUT.iterdir()))} cases to {OUT.relative_to(ROOT)}")


RUN = ["--inputs", "inputs.safetensors", "--out", "out.safetensors"]


def chain_text(n, ops):
    lines = ["graph {", "  %x: f32[4, 8] = input"]
    prev = "x"
    for i in range(n):
        lines.append(f"  %v{i}: f32[4, 8] = {ops[i % len(ops)].format(p=prev)}")
        prev = f"v{i}"
    return "\n".join(lines + [f"  return %{prev}", "}"]) + "\n"


def reliability_cases(artifact, empty_st):
    """Issue 41: one case per class of hostile input, faults and scale (families in the names:
    hang_, panic_, stack_, mem_, msg_, out_)."""
    x48 = st_bytes({"x": ("F32", [4, 8], f32([0.01 * i for i in range(32)]))})
    # --- hangs and unbounded reads: FIFOs and /dev/zero as model, weights, inputs
    notreg = "is not a regular file"
    case("hang_fifo_model", [r(["inspect", "model.json"], 2, notreg), r(["run", "model.json", *RUN], 2, notreg)],
         setup={"fifo": ["model.json"]})
    case("hang_fifo_inputs", [r(["run", "graph.json", "--inputs", "in.fifo", "--out", "o.safetensors"], 2, notreg)],
         graph_doc=graph(), setup={"fifo": ["in.fifo"]})
    case("hang_fifo_weights", [r(["run", ".", *RUN], 2, notreg)], graph_doc=graph(), copy=("inputs.safetensors",),
         setup={"fifo": ["weights.safetensors"]})
    case("hang_devzero_model", [r(["inspect", "model.json"], 2, notreg), r(["compile", "model.json", "-o", "a.fxa"], 2, notreg)],
         setup={"symlink": {"model.json": "/dev/zero"}})
    case("hang_devzero_inputs", [r(["run", "graph.json", "--inputs", "/dev/zero", "--out", "o.safetensors"], 2, notreg)],
         graph_doc=graph())
    case("hang_devzero_weights", [r(["run", ".", *RUN], 2, notreg), r(["check", "."], 2, notreg)], graph_doc=graph(),
         copy=("inputs.safetensors",), setup={"symlink": {"weights.safetensors": "/dev/zero"}})
    case("hang_devzero_artifact", [r(["run", "a.fxa", *RUN], 2, notreg)], copy=("inputs.safetensors",),
         setup={"symlink": {"a.fxa": "/dev/zero"}})
    # --- panics: CLI counts, stdout errors, thread counts, artifact sizes
    big = "18446744073709551615"
    case("panic_bench_huge_iters", [r(["bench", ".", "--iters", big], 2, "at most 1000000000 runs"),
                                    r(["bench", ".", "--warmup", big], 2, "at most 1000000000 runs")], graph_doc=graph())
    case("panic_threads_huge", [r(["run", ".", *RUN, "--threads", big], 2, "worker threads asked for"),
                                r(["run", ".", *RUN, "--threads", "0"], 2, "worker threads asked for"),
                                r(["copy-peak", "--threads", big], 2, "worker threads asked for")], graph_doc=graph())
    case("panic_copy_peak_huge", [r(["copy-peak", "--mib", "65536", "--max-memory", "1000000000"], 2,
                                    "more than the memory limit")], copy=())
    case("panic_stdout_full", [r(["inspect", "graph.json"], 2, "writing standard output", stdout_file="/dev/full"),
                               r(["ops"], 2, "writing standard output", stdout_file="/dev/full")], graph_doc=graph())
    case("panic_stdout_closed", [r(["ops"], 0, close_stdout=True), r(["inspect", "graph.json"], 0, close_stdout=True)],
         graph_doc=graph())
    hdr = lambda shape, inputs=(0,): json.dumps({
        "compiler_version": "0.1.0", "opt_level": 2, "graph": "", "stablehlo": {"Err": "-"},
        "program": {"values": [{"name": "x", "dtype": "f32", "shape": [4, 8]},
                               {"name": "y", "dtype": "f32", "shape": shape}],
                    "inputs": list(inputs), "constants": [], "outputs": [1], "steps": []}}).encode()
    case("panic_artifact_output_2p63", [r(["run", "a.fxa", *RUN], 2, "has more than 9223372036854775807 bytes")],
         files={"a.fxa": artifact(hdr([9223372036854775807]), empty_st), "inputs.safetensors": x48}, copy=())
    case("panic_artifact_plan_over_limit", [r(["run", "a.fxa", *RUN, "--max-memory", "1000000"], 2, "the memory plan needs")],
         files={"a.fxa": artifact(hdr([1 << 40], (0, 1)), empty_st), "inputs.safetensors": x48}, copy=())
    # --- stack depth and scale: 10,000-node elementwise chains
    case("stack_chain_10k", [r(["compile", "m.fxir", "-o", "a.fxa"], 0), r(["run", "m.fxir", *RUN], 0),
                             r(["lower", "m.fxir", "-O2", "-o", "m.mlir"], 0)],
         files={"m.fxir": chain_text(10000, ["aten.exp.default(%{p})", "aten.tanh.default(%{p})",
                                              "aten.sigmoid.default(%{p})"]).encode(), "inputs.safetensors": x48}, copy=())
    case("stack_neg_chain_10k_O0", [r(["compile", "-O0", "m.fxir", "-o", "a.fxa"], 0), r(["run", "a.fxa", *RUN], 0),
                                    r(["run", "--reference", "m.fxir", *RUN], 0)],
         files={"m.fxir": chain_text(10000, ["aten.neg.default(%{p})"]).encode(), "inputs.safetensors": x48}, copy=())
    # --- memory: declared zip sizes, strided views, lowering matrices, live sums, plans
    pt2 = (SRC / "model.pt2").read_bytes()
    case("mem_zip_member_inflates", [r(["inspect", "model.pt2"], 2, "inflates beyond its declared size")],
         files={"model.pt2": inflating_member(pt2)}, copy=())
    def stride0(d):
        m = d["config"]["fc1.bias"]["tensor_meta"]
        m["sizes"] = [{"as_int": 1 << 28}]
        m["strides"] = [{"as_int": 0}]
    case("mem_pt2_stride0_view", [r(["inspect", "model.pt2", "--max-memory", "100000000"], 2, "too large for its")],
         files={"model.pt2": rewrite_zip(pt2, lambda n, b: edit_json(b, stride0) if n.endswith("model_weights_config.json") else b)},
         copy=())
    def many_views(d):
        base = d["config"]["fc1.weight"]
        for i in range(2000):
            d["config"][f"view{i}"] = json.loads(json.dumps(base))
    case("mem_pt2_many_views", [r(["inspect", "model.pt2", "--max-memory", "10000000"], 2, "memory budget")],
         files={"model.pt2": rewrite_zip(pt2, lambda n, b: edit_json(b, many_views) if n.endswith("model_weights_config.json") else b)},
         copy=())
    pool = ("graph {\n  %x: f32[1, 1, 4, 4] = input\n  %y: f32[1, 1, 2147483648, 2] = "
            "aten._adaptive_avg_pool2d.default(%x, output_size=[2147483648, 2])\n  return %y\n}\n")
    case("mem_adaptive_pool_matrix", [r(["lower", "m.fxir", "-o", "m.mlir", "--max-memory", "1000000000"], 2,
                                        "adaptive pooling matrix")], files={"m.fxir": pool.encode()}, copy=())
    full = ("graph {\n  %x: f32[4, 8] = input\n  %y: f32[2147483648] = aten.full.default(size=[2147483648], "
            "fill_value=1.0)\n  return %y\n}\n")
    case("mem_full_2p31", [r(["run", "m.fxir", *RUN, "--max-memory", "4294967296"], 2, "the memory plan needs"),
                           r(["run", "--reference", "m.fxir", *RUN, "--max-memory", "4294967296"], 2, "more than the interpreter's limit")],
         files={"m.fxir": full.encode(), "inputs.safetensors": x48}, copy=())
    live = ("graph {\n  %x: f32[4, 8] = input\n  %a: f32[4, 8] = aten.exp.default(%x)\n  %b: f32[4, 8] = "
            "aten.neg.default(%x)\n  %c: f32[4, 8] = aten.add.Tensor(%a, %b)\n  return %c\n}\n")
    case("mem_interp_live_sum", [r(["run", "--reference", "m.fxir", *RUN, "--max-memory", "700"], 2, "already live"),
                                 r(["run", "--reference", "m.fxir", *RUN, "--max-memory", "1000"], 0)],
         files={"m.fxir": live.encode(), "inputs.safetensors": x48}, copy=())
    # --- messages: names escaped and shortened; unused unknown ops
    g = graph()
    g["nodes"][0]["args"]["self"]["tensor"] = "bad\nname"
    case("msg_name_with_newline", [r(["inspect", "graph.json"], 2, "unknown value 'bad\\nname'")], graph_doc=g)
    g = graph()
    g["nodes"][0]["args"]["self"]["tensor"] = "n" * 100_000
    case("msg_name_100kb", [r(["inspect", "graph.json"], 2, "nnn…' (not defined", max_stderr=1000)], graph_doc=g)
    unused = ("graph {\n  %x: f32[4, 8] = input\n  %u: f32[4, 8] = unsupported \"aten.frobnicate.default\"(self=%x)\n"
              "  %y: f32[4, 8] = aten.relu.default(%x)\n  return %y\n}\n")
    case("msg_unused_unknown_op", [r(["run", "m.fxir", *RUN], 0), r(["run", "--reference", "m.fxir", *RUN], 0),
                                   r(["compile", "-O0", "m.fxir", "-o", "a.fxa"], 0), r(["lower", "m.fxir", "-o", "m.mlir"], 0),
                                   r(["inspect", "m.fxir"], 0, stdout="aten.frobnicate.default")],
         files={"m.fxir": unused.encode(), "inputs.safetensors": x48}, copy=())


def inflating_member(data):
    """The .pt2 with one weight member deflated, its declared (uncompressed) size set to 16
    bytes in both headers while it inflates to its real size (and a CRC that no longer
    matches): a reader that trusts the declared size reads past it."""
    import io
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    target = next(n for n in src.namelist() if n.endswith("data/weights/weight_0"))
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            b = src.read(info.filename)
            if info.filename == target:
                b = b * 64
                z.writestr(info.filename, b, compress_type=zipfile.ZIP_DEFLATED)
            else:
                z.writestr(info.filename, b)
    raw = bytearray(out.getvalue())
    real = len(src.read(target)) * 64
    name = target.encode()

    def declare_16(signature, name_len_at, name_at, size_at, was=None):
        """Sets the uncompressed size (at ``size_at``) of each header with ``signature`` that
        names the member to 16 (checking it was ``was``, when given)."""
        pos = 0
        while (i := raw.find(signature, pos)) >= 0:
            n = struct.unpack_from("<H", raw, i + name_len_at)[0]
            if raw[i + name_at:i + name_at + n] == name:
                if was is not None:
                    assert struct.unpack_from("<I", raw, i + size_at)[0] == was
                struct.pack_into("<I", raw, i + size_at, 16)
            pos = i + 4

    declare_16(b"PK\x03\x04", 26, 30, 22)  # local header: size at +22
    declare_16(b"PK\x01\x02", 28, 46, 24, was=real)  # central directory entry: at +24
    return bytes(raw)


def patched_weights(changes):
    data = (SRC / "weights.safetensors").read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    tensors = {}
    for k, v in header.items():
        if k == "__metadata__":
            continue
        a, b = v["data_offsets"]
        tensors[k] = (v["dtype"], v["shape"], body[a:b])
    for k, v in changes.items():
        if v is None:
            tensors.pop(k)
        else:
            tensors[k] = v
    return st_bytes(tensors)


def edit_json(b, f):
    d = json.loads(b)
    f(d)
    return json.dumps(d).encode()


def rewrite_zip(data, mutate):
    import io
    src = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as z:
        for info in src.infolist():
            b = mutate(info.filename, src.read(info.filename))
            if b is not None:
                z.writestr(info.filename, b)
    return out.getvalue()



# A program text (`fxhlo compile --print-program`, docs/runtime.md): y = relu(x + c) over f32[4, 8],
# `c` a constant named "c" in the weights.
PROGRAM_TEXT = """fxhlo.program v1
inputs %0
outputs %2
const %1 = "c"
%0 : [4, 8] f32 "x"
%1 : [4, 8] f32 "c"
%2 : [4, 8] f32 "y"

step 0 elementwise (%0, %1) -> (%2) {
  nodes: [add, relu]
  grid: [1]
  blocks: whole
  dims: [4, 8]
  insts: {
    r0 = load leaf0
    r1 = load leaf1
    r2 = add r0, r1
    r3 = relu r2
  }
  leaves: [
    {offset: 0, src: Slot{kind: F32, slot: 0}, strides: [8, 1]}
    {offset: 0, src: Slot{kind: F32, slot: 1}, strides: [8, 1]}
  ]
  num_regs: 4
  outputs: [3]
  shape: [4, 8]
}
"""


def program_text_cases(empty_st):
    """Program texts: one that runs, then one broken thing each; every error names its line."""
    x48 = st_bytes({"x": ("F32", [4, 8], f32([0.01 * i - 0.1 for i in range(32)]))})
    c48 = st_bytes({"c": ("F32", [4, 8], f32([0.5] * 32))})
    run = lambda extra=("--weights", "c.safetensors"): ["run", "p.fxp", *extra, *RUN]

    def text_case(name, text, msg, extra=("--weights", "c.safetensors"), exit=2):
        files = {"p.fxp": text.encode(), "inputs.safetensors": x48, "c.safetensors": c48}
        case(name, [r(run(extra), exit, msg)], files=files, copy=())
    t = PROGRAM_TEXT
    text_case("program_text_runs", t, None, exit=0)
    text_case("program_text_no_weights", t, "a program text needs --weights", extra=())
    text_case("program_text_constant_not_in_weights", t.replace('"c"\n%0', '"d"\n%0'),
              "constant 'd' is not in the weights")
    text_case("program_text_unknown_kind", t.replace("elementwise (", "elementwize ("),
              "line 9: unknown kernel kind 'elementwize'")
    text_case("program_text_undeclared_value", t.replace("-> (%2)", "-> (%7)"),
              "line 9: step 0 names %7, which is not declared")
    text_case("program_text_undeclared_output", t.replace("outputs %2", "outputs %5"),
              "line 3: %5 is not declared")
    text_case("program_text_unknown_instruction", t.replace("relu r2", "frobnicate r2"),
              "line 18: unknown instruction 'frobnicate'")
    text_case("program_text_missing_field", t.replace("  num_regs: 4\n", ""),
              "line 9: step 0 (elementwise): missing field `num_regs`")
    text_case("program_text_unclosed", t[: t.index("  outputs: [3]")], "is not closed")
    text_case("program_text_bad_dtype", t.replace('[4, 8] f32 "y"', '[4, 8] f33 "y"'),
              "line 7: unknown element type 'f33'")
    text_case("program_text_step_reads_unwritten", t.replace("(%0, %1) -> (%2)", "(%0, %2) -> (%2)"),
              "step 0 reads value 'y' before it is computed")

if __name__ == "__main__":
    main()
