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


def case(name, runs, files=None, graph_doc=None, copy=("weights.safetensors", "inputs.safetensors")):
    d = OUT / name
    d.mkdir(parents=True)
    for f in copy:
        shutil.copy(SRC / f, d / f)
    if graph_doc is not None:
        text = graph_doc if isinstance(graph_doc, (str, bytes)) else json.dumps(graph_doc, indent=1)
        (d / "graph.json").write_bytes(text if isinstance(text, bytes) else text.encode())
    for fname, data in (files or {}).items():
        (d / fname).write_bytes(data)
    (d / "expect.json").write_text(json.dumps({"runs": runs}, indent=1) + "\n")


def r(args, exit, stderr=None, stdout=None):
    run = {"args": args, "exit": exit}
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
    print(f"wrote {len(list(OUT.iterdir()))} cases to {OUT.relative_to(ROOT)}")


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


if __name__ == "__main__":
    main()
