"""Dump a PyTorch model as an fxjson graph (docs/graph-format.md) plus test tensors.

    python -m fxhlo.dump --model mlp --out testdata/mlp [--pt2]

The model is captured with ``torch.export.export(model.eval(), inputs).run_decompositions()``
(the core ATen decomposition table).  The output folder gets

    graph.json            the graph, fxjson version 1
    weights.safetensors   parameters, buffers and lifted constants keyed by state_dict name
    inputs.safetensors    the example inputs keyed by user-input placeholder name
    expected.safetensors  eager outputs of the original model, keyed output0, output1, ...
    meta.json             name, torch version, seed, output count, tolerance
    model.pt2             (with save_pt2 / --pt2) torch.export.save of the decomposed program

After writing, the exported program and the written fxjson (interpreted with torch ops, see
``run_fxjson``) are both checked against the eager outputs.
"""

from __future__ import annotations

import argparse
import json
import math
import operator
import os
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
import torch.fx
from torch.export import ExportedProgram
from torch.export.graph_signature import InputKind, OutputKind
from torch.utils import _pytree as pytree

from . import __version__

FORMAT = "fxhlo-graph"
VERSION = 1
DEFAULT_TOLERANCE = {"rtol": 1e-4, "atol": 1e-5}

DTYPE_NAMES = {
    torch.float32: "f32",
    torch.float64: "f64",
    torch.float16: "f16",
    torch.bfloat16: "bf16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "bool",
}
DTYPES_BY_NAME = {v: k for k, v in DTYPE_NAMES.items()}

ARG_KEYS = {"tensor", "tensors", "int", "ints", "float", "floats", "bool", "bools", "str",
            "dtype", "layout", "device", "memory_format", "none"}
INPUT_KINDS = {"user_input", "parameter", "buffer", "constant"}

_KIND_NAMES = {
    InputKind.USER_INPUT: "user_input",
    InputKind.PARAMETER: "parameter",
    InputKind.BUFFER: "buffer",
    InputKind.CONSTANT_TENSOR: "constant",
}

# Runtime assertions without results; they do not affect values and are not written.
_DROPPED_OPS = {
    "aten._assert_tensor_metadata.default",
    "aten._assert_async.default",
    "aten._assert_async.msg",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default",
}


_UNSTABLE_META = ("from_node", "stack_trace")


# c10::ScalarType codes, as integer schema defaults spell dtypes.
_SCALAR_TYPES = {0: torch.uint8, 1: torch.int8, 2: torch.int16, 3: torch.int32, 4: torch.int64,
                 5: torch.float16, 6: torch.float32, 7: torch.float64, 11: torch.bool,
                 15: torch.bfloat16}


class DumpError(Exception):
    """The model/graph cannot be represented in fxjson."""


# ------------------------------------------------------------------------------- encoding

def dtype_name(dt: torch.dtype, where: str = "") -> str:
    try:
        return DTYPE_NAMES[dt]
    except KeyError:
        raise DumpError(f"{where}: dtype {dt} is not supported by fxjson "
                        f"(supported: {', '.join(DTYPE_NAMES.values())})") from None


def _dim(d, where: str):
    if isinstance(d, int):
        return int(d)
    if isinstance(d, torch.SymInt):
        node = d.node
        # a SymInt that is actually static
        if hasattr(node, "maybe_as_int") and node.maybe_as_int() is not None:
            return int(node.maybe_as_int())
        return str(d)
    raise DumpError(f"{where}: unsupported shape entry {d!r} ({type(d).__name__})")


def type_of(val, where: str) -> Dict[str, Any]:
    if not isinstance(val, torch.Tensor):
        raise DumpError(f"{where}: expected a tensor value, got {type(val).__name__} ({val!r})")
    return {"dtype": dtype_name(val.dtype, where), "shape": [_dim(d, where) for d in val.shape]}


def _float(v: float):
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return float(v)


def _enum_name(v) -> str:
    s = str(v)
    return s[len("torch."):] if s.startswith("torch.") else s


def _unwrap_optional(t):
    while isinstance(t, torch.OptionalType):
        t = t.getElementType()
    return t


def _list_elem(t):
    t = _unwrap_optional(t)
    if isinstance(t, torch.ListType):
        return _unwrap_optional(t.getElementType())
    return None


def _is_tensor_type(t) -> bool:
    return isinstance(_unwrap_optional(t), torch.TensorType)


class _Encoder:
    def __init__(self, value_name):
        self.value_name = value_name  # fx.Node -> fxjson value name

    def tensor_ref(self, node: torch.fx.Node, where: str) -> str:
        val = node.meta.get("val")
        if val is not None and not isinstance(val, torch.Tensor):
            raise DumpError(f"{where}: argument refers to {node.name!r}, which is a "
                            f"{type(val).__name__} value, not a tensor (symbolic scalars are "
                            f"not supported)")
        return self.value_name(node, where)

    def encode(self, value, arg: Optional[torch.Argument], where: str) -> Dict[str, Any]:
        t = arg.real_type if arg is not None else None
        base = _unwrap_optional(t) if t is not None else None

        if value is None:
            return {"none": None}
        if isinstance(value, torch.fx.Node):
            return {"tensor": self.tensor_ref(value, where)}
        if isinstance(value, bool):
            return {"bool": value}
        if isinstance(value, int):
            if "ScalarType" in str(t):  # a schema default such as randperm's dtype=4
                return {"dtype": dtype_name(_SCALAR_TYPES[value], where)}
            if isinstance(base, torch.FloatType):
                return {"float": _float(float(value))}
            if isinstance(base, torch.ListType):
                n = getattr(arg, "N", None) or 1
                return self.encode([value] * n, arg, where)
            return {"int": int(value)}
        if isinstance(value, float):
            if isinstance(base, torch.ListType):
                n = getattr(arg, "N", None) or 1
                return self.encode([value] * n, arg, where)
            return {"float": _float(value)}
        if isinstance(value, str):
            return {"str": value}
        if isinstance(value, torch.dtype):
            return {"dtype": dtype_name(value, where)}
        if isinstance(value, torch.device):
            return {"device": str(value)}
        if isinstance(value, torch.layout):
            return {"layout": _enum_name(value)}
        if isinstance(value, torch.memory_format):
            return {"memory_format": _enum_name(value)}
        if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            raise DumpError(f"{where}: symbolic scalar {value!r} is not supported")
        if isinstance(value, (list, tuple)):
            return self.encode_list(list(value), t, where)
        raise DumpError(f"{where}: cannot encode argument value {value!r} of type "
                        f"{type(value).__module__}.{type(value).__name__}")

    def encode_list(self, items: list, t, where: str) -> Dict[str, Any]:
        elem = _list_elem(t) if t is not None else None
        if (elem is not None and isinstance(elem, torch.TensorType)) or (
                items and all(x is None or isinstance(x, torch.fx.Node) for x in items)
                and any(isinstance(x, torch.fx.Node) for x in items)):
            out = []
            for x in items:
                if x is None:
                    out.append(None)
                elif isinstance(x, torch.fx.Node):
                    out.append(self.tensor_ref(x, where))
                else:
                    raise DumpError(f"{where}: tensor list holds a non-tensor {x!r}")
            return {"tensors": out}
        for x in items:
            if isinstance(x, (torch.fx.Node, torch.SymInt, torch.SymFloat, torch.SymBool)):
                raise DumpError(f"{where}: list {items!r} holds a symbolic/graph value; only "
                                f"static lists are supported")
        if not items:
            if isinstance(elem, torch.IntType) or isinstance(elem, torch.SymIntType):
                return {"ints": []}
            if isinstance(elem, torch.FloatType):
                return {"floats": []}
            if isinstance(elem, torch.BoolType):
                return {"bools": []}
            raise DumpError(f"{where}: cannot encode an empty list of schema type {t}")
        if all(isinstance(x, bool) for x in items):
            return {"bools": list(items)}
        if any(isinstance(x, bool) for x in items):
            raise DumpError(f"{where}: list mixes bools and numbers: {items!r}")
        if all(isinstance(x, int) for x in items) and not isinstance(elem, torch.FloatType):
            return {"ints": [int(x) for x in items]}
        if all(isinstance(x, (int, float)) for x in items):
            return {"floats": [_float(float(x)) for x in items]}
        raise DumpError(f"{where}: cannot encode list {items!r}")


def _bind_args(node: torch.fx.Node, schema) -> List[Tuple[Any, Any]]:
    """Pairs (schema argument, value) for every schema argument, defaults filled in."""
    where = f"node {node.name!r} ({node.target})"
    sargs = list(schema.arguments)
    if len(node.args) > len(sargs):
        raise DumpError(f"{where}: {len(node.args)} positional args but the schema has "
                        f"{len(sargs)}")
    names = {a.name for a in sargs}
    for k in node.kwargs:
        if k not in names:
            raise DumpError(f"{where}: keyword argument {k!r} is not in the schema {schema}")
    out = []
    for i, a in enumerate(sargs):
        if i < len(node.args):
            if a.name in node.kwargs:
                raise DumpError(f"{where}: argument {a.name!r} given twice")
            out.append((a, node.args[i]))
        elif a.name in node.kwargs:
            out.append((a, node.kwargs[a.name]))
        elif a.has_default_value():
            out.append((a, a.default_value))
        else:
            raise DumpError(f"{where}: required argument {a.name!r} missing")
    return out


# ------------------------------------------------------------------------------- export

def export_program(model: torch.nn.Module, example_inputs: tuple) -> ExportedProgram:
    ep = torch.export.export(model.eval(), tuple(example_inputs))
    try:  # torch's table plus library ops' decompositions (needs the native module)
        from .decomp import export_decompositions
    except ImportError:
        return ep.run_decompositions()
    return ep.run_decompositions(export_decompositions())


def graph_to_fxjson(ep: ExportedProgram) -> Dict[str, Any]:
    """Convert a (decomposed) ExportedProgram to an fxjson dict."""
    sig = ep.graph_signature
    specs = {}
    for s in sig.input_specs:
        if s.kind not in _KIND_NAMES:
            raise DumpError(f"input {getattr(s.arg, 'name', s.arg)!r}: input kind {s.kind.name} "
                            f"is not supported (only USER_INPUT, PARAMETER, BUFFER, "
                            f"CONSTANT_TENSOR)")
        specs[s.arg.name] = s
    for s in sig.output_specs:
        if s.kind != OutputKind.USER_OUTPUT:
            raise DumpError(f"output {getattr(s.arg, 'name', s.arg)!r} has kind {s.kind.name} "
                            f"(target {s.target!r}); only USER_OUTPUT is supported (the model "
                            f"must not mutate buffers or inputs)")
    canon = canonical_targets(ep)

    def placeholder_entry(n: torch.fx.Node) -> Dict[str, Any]:
        s = specs.get(n.name)
        if s is None:
            raise DumpError(f"placeholder {n.name!r} is not in the graph signature")
        entry = {"name": n.name, "kind": _KIND_NAMES[s.kind]}
        if s.kind != InputKind.USER_INPUT:
            entry["target"] = canon[s.target]
        return entry

    return encode_graph(ep.graph_module.graph, placeholder_entry)


def graph_module_to_fxjson(gm: torch.fx.GraphModule,
                           outputs: Optional[Sequence[torch.fx.Node]] = None
                           ) -> Tuple[Dict[str, Any], Dict[str, torch.Tensor]]:
    """Convert a plain GraphModule of core ATen ops (e.g. from aot_autograd) to fxjson.

    Every placeholder becomes a user input named after the node (in placeholder order), except
    unused non-tensor ones;
    ``get_attr`` nodes holding tensors (lifted constants) become ``constant`` inputs whose bytes
    are returned in the weights dict, keyed by the attribute path.  ``outputs`` (default: the
    graph's output node's tensors) selects the values the graph returns; only the nodes they
    need are written.  Every node needs ``meta['val']``, as make_fx/aot_autograd record it.
    Returns ``(fxjson dict, weights)``.
    """
    graph = gm.graph
    weights: Dict[str, torch.Tensor] = {}

    def placeholder_entry(n: torch.fx.Node) -> Optional[Dict[str, Any]]:
        if not n.users and not isinstance(n.meta.get("val"), torch.Tensor):
            return None  # an unused non-tensor input (a specialized size)
        return {"name": n.name, "kind": "user_input"}

    def get_attr_entry(n: torch.fx.Node) -> Dict[str, Any]:
        t = gm
        for part in str(n.target).split("."):
            t = getattr(t, part, None)
        if not isinstance(t, torch.Tensor):
            raise DumpError(f"node {n.name!r}: get_attr {n.target!r} is a "
                            f"{type(t).__name__}, not a tensor")
        weights[str(n.target)] = t.detach().contiguous()
        if "val" not in n.meta:
            n.meta["val"] = t
        return {"name": n.name, "kind": "constant", "target": str(n.target)}

    g = encode_graph(graph, placeholder_entry, get_attr_entry=get_attr_entry, outputs=outputs)
    return g, weights


def _needed_nodes(graph: torch.fx.Graph, outputs: Sequence[torch.fx.Node]) -> set:
    """The nodes ``outputs`` depend on (themselves included); getitems of multi-result nodes
    that are needed are kept too, so result names stay those of the getitem nodes."""
    need, stack = set(), list(outputs)
    while stack:
        n = stack.pop()
        if n in need:
            continue
        need.add(n)
        stack.extend(n.all_input_nodes)
    for n in graph.nodes:
        if n.op == "call_function" and n.target is operator.getitem and n.args[0] in need:
            need.add(n)
    return need


def encode_graph(graph: torch.fx.Graph, placeholder_entry, *, get_attr_entry=None,
                 outputs: Optional[Sequence[torch.fx.Node]] = None) -> Dict[str, Any]:
    """The shared fxjson encoder of an FX graph of ATen op overloads.

    ``placeholder_entry(node)`` returns the input entry (``name``, ``kind``, maybe ``target``)
    of a placeholder, or None to leave it out; its ``type`` is added from ``meta['val']``.  ``get_attr_entry(node)`` does
    the same for ``get_attr`` nodes (refused when None).  ``outputs`` overrides the graph's
    outputs (then only the nodes they need are encoded; placeholders are always kept, in
    order).
    """
    all_names = {n.name for n in graph.nodes}
    used_names = set()
    # fx.Node -> value name, plus (multi-result node, index) -> name
    names: Dict[torch.fx.Node, str] = {}
    multi_results: Dict[torch.fx.Node, List[str]] = {}
    keep = None if outputs is None else _needed_nodes(graph, outputs)

    def value_name(n: torch.fx.Node, where: str) -> str:
        if n not in names:
            raise DumpError(f"{where}: refers to {n.name!r}, which is not a value defined "
                            f"before it")
        return names[n]

    def output_names(outs) -> List[str]:
        res = []
        for i, o in enumerate(outs):
            if not isinstance(o, torch.fx.Node):
                raise DumpError(f"output {i} is {o!r}, not a tensor value of the graph")
            res.append(value_name(o, f"output {i}"))
        return res

    enc = _Encoder(value_name)
    inputs, nodes = [], []
    out_names: Optional[List[str]] = None

    for n in graph.nodes:
        where = f"node {n.name!r}"
        if keep is not None and n.op not in ("placeholder", "output") and n not in keep:
            continue
        if n.op == "placeholder" or n.op == "get_attr":
            if n.op == "placeholder":
                entry = placeholder_entry(n)
                if entry is None:  # not a graph input of the fxjson graph
                    continue
                entry = dict(entry)
            elif get_attr_entry is not None:
                entry = dict(get_attr_entry(n))
            else:
                raise DumpError(f"{where}: FX node kind 'get_attr' is not supported here")
            entry["type"] = type_of(n.meta.get("val"), f"input {n.name!r}")
            inputs.append(entry)
            names[n] = n.name
            used_names.add(n.name)
        elif n.op == "call_function":
            if n.target is operator.getitem:
                src, idx = n.args
                multi = multi_results.get(src)
                if multi is None:
                    raise DumpError(f"{where}: getitem on {getattr(src, 'name', src)!r}, "
                                    f"which is not a multi-result op node")
                if not isinstance(idx, int) or not (0 <= idx < len(multi)):
                    raise DumpError(f"{where}: getitem index {idx!r} out of range")
                names[n] = multi[idx]
                continue
            if not isinstance(n.target, torch._ops.OpOverload):
                raise DumpError(f"{where}: call_function target {n.target!r} is not an ATen "
                                f"op overload (higher-order ops, python operators and symbolic "
                                f"shape ops are not supported)")
            op = _op_name(n.target)
            if op in _DROPPED_OPS:
                if n.users:
                    raise DumpError(f"{where}: assertion op {op} has users")
                continue
            where = f"node {n.name!r} ({op})"
            args = {}
            for a, v in _bind_args(n, n.target._schema):
                args[a.name] = enc.encode(v, a, f"{where} argument {a.name!r}")
            val = n.meta.get("val")
            if val is None:
                raise DumpError(f"{where}: no meta['val'] (result type unknown)")
            if isinstance(val, (list, tuple)):
                readers = {}
                for u in n.users:
                    if keep is not None and u not in keep:
                        continue
                    if u.op == "call_function" and u.target is operator.getitem:
                        i = u.args[1]
                        if isinstance(i, int) and i not in readers:
                            readers[i] = u.name
                    else:
                        raise DumpError(f"{where}: multi-result value used directly by "
                                        f"{u.name!r} (expected getitem)")
                rnames, results = [], []
                for i, rv in enumerate(val):
                    rn = readers.get(i)
                    if rn is None:
                        # torch.export's serializer names unused results this way too,
                        # so fxjson and .pt2 give the same graph.
                        rn = f"{n.name}_unused_{i}"
                        while rn in all_names or rn in used_names:
                            rn += "_"
                    if rn in used_names:
                        raise DumpError(f"{where}: result name {rn!r} is used twice")
                    used_names.add(rn)
                    rnames.append(rn)
                    results.append({"name": rn, "type": type_of(rv, f"{where} result {i}")})
                multi_results[n] = rnames
            else:
                if n.name in used_names:
                    raise DumpError(f"{where}: name {n.name!r} is used twice")
                used_names.add(n.name)
                names[n] = n.name
                results = [{"name": n.name, "type": type_of(val, f"{where} result")}]
            nodes.append({"name": n.name, "op": op, "args": args, "results": results})
        elif n.op == "output":
            outs = n.args[0] if outputs is None else list(outputs)
            if not isinstance(outs, (list, tuple)):
                outs = [outs]
            out_names = output_names(outs)
        else:
            raise DumpError(f"{where}: FX node kind {n.op!r} is not supported "
                            f"(only placeholder, call_function, output)")

    if out_names is None:
        raise DumpError("the graph has no output node")
    g = {
        "format": FORMAT,
        "version": VERSION,
        "producer": {"torch": torch.__version__, "fxhlo": __version__},
    }
    if any(i["kind"] != "user_input" for i in inputs):
        g["weights"] = "weights.safetensors"
    g["inputs"] = inputs
    g["nodes"] = nodes
    g["outputs"] = out_names
    return g


def _op_name(op: torch._ops.OpOverload) -> str:
    # OpOverload str is "aten.addmm.default"; namespace.name.overload
    return f"{op.namespace}.{op._schema.name.split('::', 1)[-1]}.{op._overloadname}"


def _lookup_tensor(ep: ExportedProgram, spec) -> torch.Tensor:
    if spec.target in ep.state_dict:
        t = ep.state_dict[spec.target]
    elif spec.target in ep.constants:
        t = ep.constants[spec.target]
    else:
        raise DumpError(f"input {spec.arg.name!r}: target {spec.target!r} found in neither "
                        f"state_dict nor constants")
    if not isinstance(t, torch.Tensor):
        raise DumpError(f"input {spec.arg.name!r}: target {spec.target!r} is a "
                        f"{type(t).__name__}, not a tensor")
    return t


def canonical_targets(ep: ExportedProgram) -> Dict[str, str]:
    """Map every weight target to the first target holding the very same tensor view.

    Tied parameters (e.g. GPT-2's lm_head.weight and transformer.wte.weight) are one tensor
    under two state_dict names; fxjson stores it once and both inputs name that target.
    """
    seen: Dict[tuple, str] = {}
    out: Dict[str, str] = {}
    for s in ep.graph_signature.input_specs:
        if s.kind == InputKind.USER_INPUT or s.target in out:
            continue
        t = _lookup_tensor(ep, s)
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape),
               tuple(t.stride()), t.dtype)
        out[s.target] = seen.setdefault(key, s.target)
    return out


def collect_weights(ep: ExportedProgram) -> Dict[str, torch.Tensor]:
    """Parameters, buffers and lifted constants keyed by (canonical) target, contiguous."""
    canon = canonical_targets(ep)
    weights = {}
    for s in ep.graph_signature.input_specs:
        if s.kind == InputKind.USER_INPUT:
            continue
        tgt = canon[s.target]
        if tgt not in weights:
            weights[tgt] = _lookup_tensor(ep, s).detach().contiguous().clone()
    return weights


def user_input_names(ep: ExportedProgram) -> List[str]:
    return [s.arg.name for s in ep.graph_signature.input_specs if s.kind == InputKind.USER_INPUT]


def to_json_text(g: Dict[str, Any]) -> str:
    """fxjson text: top-level keys one per line, one line per input and per node."""
    def d(x):
        return json.dumps(x, allow_nan=False, separators=(", ", ": "))

    lines = ["{"]
    keys = list(g)
    for i, k in enumerate(keys):
        comma = "," if i + 1 < len(keys) else ""
        v = g[k]
        if k in ("inputs", "nodes") and v:
            lines.append(f"  {d(k)}: [")
            lines.extend(f"    {d(e)}," for e in v[:-1])
            lines.append(f"    {d(v[-1])}")
            lines.append(f"  ]{comma}")
        else:
            lines.append(f"  {d(k)}: {d(v)}{comma}")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------- checking

def validate_fxjson(g: Dict[str, Any], weights: Optional[Dict[str, torch.Tensor]] = None) -> None:
    """Structural check of an fxjson dict against docs/graph-format.md; raises DumpError."""
    def fail(msg):
        raise DumpError(f"invalid fxjson: {msg}")

    if g.get("format") != FORMAT:
        fail(f"format is {g.get('format')!r}")
    if g.get("version") != VERSION:
        fail(f"version is {g.get('version')!r}")
    for k in ("inputs", "nodes", "outputs"):
        if not isinstance(g.get(k), list):
            fail(f"{k!r} missing or not a list")
    extra = set(g) - {"format", "version", "producer", "weights", "inputs", "nodes", "outputs"}
    if extra:
        fail(f"unknown top-level keys {sorted(extra)}")

    def check_type(t, where):
        if not isinstance(t, dict) or set(t) != {"dtype", "shape"}:
            fail(f"{where}: bad type {t!r}")
        if t["dtype"] not in DTYPES_BY_NAME:
            fail(f"{where}: bad dtype {t['dtype']!r}")
        for d in t["shape"]:
            if isinstance(d, bool) or not ((isinstance(d, int) and d >= 0) or isinstance(d, str)):
                fail(f"{where}: bad shape entry {d!r}")

    defined: Dict[str, Dict[str, Any]] = {}
    for i, inp in enumerate(g["inputs"]):
        where = f"input {i} ({inp.get('name')!r})"
        if not isinstance(inp.get("name"), str) or inp["name"] in defined:
            fail(f"{where}: missing or duplicate name")
        if inp.get("kind") not in INPUT_KINDS:
            fail(f"{where}: bad kind {inp.get('kind')!r}")
        if inp["kind"] != "user_input":
            if not isinstance(inp.get("target"), str):
                fail(f"{where}: {inp['kind']} needs a target")
            if "weights" not in g:
                fail(f"{where}: graph has named constants but no 'weights'")
            if weights is not None:
                w = weights.get(inp["target"])
                if w is None:
                    fail(f"{where}: target {inp['target']!r} not in weights")
                if DTYPE_NAMES.get(w.dtype) != inp["type"]["dtype"] or \
                        list(w.shape) != inp["type"]["shape"]:
                    fail(f"{where}: weight {inp['target']!r} is {w.dtype}{list(w.shape)}, "
                         f"input type is {inp['type']}")
        check_type(inp.get("type"), where)
        defined[inp["name"]] = inp["type"]

    node_names = set()
    for node in g["nodes"]:
        where = f"node {node.get('name')!r}"
        if set(node) != {"name", "op", "args", "results"}:
            fail(f"{where}: keys are {sorted(node)}")
        if node["name"] in node_names:
            fail(f"{where}: duplicate node name")
        node_names.add(node["name"])
        parts = node["op"].split(".")
        if len(parts) != 3 or parts[0] != "aten":
            fail(f"{where}: op {node['op']!r} is not aten.<name>.<overload>")
        for an, av in node["args"].items():
            aw = f"{where} arg {an!r}"
            if not isinstance(av, dict) or len(av) != 1 or next(iter(av)) not in ARG_KEYS:
                fail(f"{aw}: bad value {av!r}")
            (k, v), = av.items()
            if k == "tensor":
                if v not in defined:
                    fail(f"{aw}: tensor {v!r} is not an input or earlier result")
            elif k == "tensors":
                for x in v:
                    if x is not None and x not in defined:
                        fail(f"{aw}: tensor {x!r} is not an input or earlier result")
            elif k == "int":
                if isinstance(v, bool) or not isinstance(v, int):
                    fail(f"{aw}: {v!r}")
            elif k == "ints":
                if not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                    fail(f"{aw}: {v!r}")
            elif k == "float":
                if not (isinstance(v, (int, float)) and not isinstance(v, bool)) and \
                        v not in ("inf", "-inf", "nan"):
                    fail(f"{aw}: {v!r}")
            elif k == "bool" and not isinstance(v, bool):
                fail(f"{aw}: {v!r}")
            elif k == "dtype" and v not in DTYPES_BY_NAME:
                fail(f"{aw}: {v!r}")
            elif k == "none" and v is not None:
                fail(f"{aw}: {v!r}")
        if not node["results"]:
            fail(f"{where}: no results")
        for r in node["results"]:
            if r.get("name") in defined:
                fail(f"{where}: result name {r.get('name')!r} defined twice")
            check_type(r.get("type"), f"{where} result {r.get('name')!r}")
        for r in node["results"]:
            defined[r["name"]] = r["type"]
    for o in g["outputs"]:
        if o not in defined:
            fail(f"output {o!r} is not a defined value")


def _decode(v: Dict[str, Any], env: Dict[str, torch.Tensor]):
    (k, x), = v.items()
    if k == "tensor":
        return env[x]
    if k == "tensors":
        return [None if n is None else env[n] for n in x]
    if k == "float":
        return float(x)
    if k == "floats":
        return [float(e) for e in x]
    if k == "dtype":
        return DTYPES_BY_NAME[x]
    if k == "layout":
        return getattr(torch, x)
    if k == "memory_format":
        return getattr(torch, x)
    if k == "device":
        return torch.device(x)
    if k == "none":
        return None
    return x


def run_fxjson(g: Dict[str, Any], weights: Dict[str, torch.Tensor],
               inputs: Dict[str, torch.Tensor]) -> List[torch.Tensor]:
    """Reference interpreter: execute an fxjson graph with torch ops (by schema-named args).

    Also checks every result's dtype/shape against the recorded type (static shapes only).
    """
    env: Dict[str, torch.Tensor] = {}
    for inp in g["inputs"]:
        env[inp["name"]] = inputs[inp["name"]] if inp["kind"] == "user_input" \
            else weights[inp["target"]]
    for node in g["nodes"]:
        _, name, overload = node["op"].split(".")
        op = getattr(getattr(torch.ops.aten, name), overload)
        kwargs = {k: _decode(v, env) for k, v in node["args"].items()}
        out = op(**kwargs)
        outs = list(out) if isinstance(out, (list, tuple)) else [out]
        if len(outs) != len(node["results"]):
            raise DumpError(f"node {node['name']!r}: op returned {len(outs)} results, graph "
                            f"lists {len(node['results'])}")
        for r, t in zip(node["results"], outs):
            want = r["type"]
            got = {"dtype": DTYPE_NAMES.get(t.dtype), "shape": list(t.shape)}
            if all(isinstance(d, int) for d in want["shape"]) and got != want:
                raise DumpError(f"node {node['name']!r} result {r['name']!r}: recorded type "
                                f"{want}, torch computes {got}")
            env[r["name"]] = t
    return [env[o] for o in g["outputs"]]


def _flatten_outputs(out, where: str) -> List[torch.Tensor]:
    flat, _ = pytree.tree_flatten(out)
    for i, t in enumerate(flat):
        if not isinstance(t, torch.Tensor):
            raise DumpError(f"{where}: output {i} is a {type(t).__name__}, not a tensor")
    return [t.detach() for t in flat]


def _compare(got: Sequence[torch.Tensor], want: Sequence[torch.Tensor], tol, what: str):
    if len(got) != len(want):
        raise DumpError(f"{what}: {len(got)} outputs, eager has {len(want)}")
    for i, (a, b) in enumerate(zip(got, want)):
        if a.dtype != b.dtype or a.shape != b.shape:
            raise DumpError(f"{what}: output {i} is {a.dtype}{list(a.shape)}, eager "
                            f"{b.dtype}{list(b.shape)}")
        if a.is_floating_point():
            ok = torch.allclose(a, b, rtol=tol["rtol"], atol=tol["atol"], equal_nan=True)
        else:
            ok = torch.equal(a, b)
        if not ok:
            err = (a.double() - b.double()).abs().max().item()
            raise DumpError(f"{what}: output {i} differs from eager (max abs err {err:g})")


# ------------------------------------------------------------------------------- dump

def dump(model: torch.nn.Module, example_inputs: tuple, out_dir, *, name: str,
         seed: Optional[int] = None, save_pt2: bool = False,
         tolerance: Optional[Dict[str, float]] = None,
         notes: Optional[str] = None, extra_meta: Optional[Dict[str, Any]] = None
         ) -> Dict[str, Any]:
    """Export ``model`` on ``example_inputs`` and write a testdata folder to ``out_dir``.

    Returns the fxjson dict.  Raises DumpError when the program cannot be represented or the
    exported program / written graph does not reproduce the eager outputs.
    """
    from safetensors.torch import save_file

    example_inputs = tuple(example_inputs)
    tol = dict(DEFAULT_TOLERANCE if tolerance is None else tolerance)
    model = model.eval()

    for i, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise DumpError(f"example input {i} is a {type(x).__name__}; only tensor inputs "
                            f"are supported")

    expected = _flatten_outputs(model(*example_inputs), "eager")
    ep = export_program(model, example_inputs)
    g = graph_to_fxjson(ep)
    weights = collect_weights(ep)

    uin = user_input_names(ep)
    if len(uin) != len(example_inputs):
        raise DumpError(f"graph has {len(uin)} user inputs, {len(example_inputs)} were given")
    inputs = {n: x.detach().contiguous().clone() for n, x in zip(uin, example_inputs)}
    if len(g["outputs"]) != len(expected):
        raise DumpError(f"graph has {len(g['outputs'])} outputs, eager returns "
                        f"{len(expected)} tensors")

    validate_fxjson(g, weights)

    # the exported program must match eager ...
    _compare(_flatten_outputs(ep.module()(*example_inputs), "exported"), expected, tol,
             "exported program")
    # ... and so must the written graph, interpreted by schema argument names
    with torch.no_grad():
        _compare(run_fxjson(g, weights, inputs), expected, tol, "fxjson graph")

    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "graph.json"), "w") as f:
        f.write(to_json_text(g))
    save_file(weights, os.path.join(out_dir, "weights.safetensors"))
    save_file(inputs, os.path.join(out_dir, "inputs.safetensors"))
    save_file({f"output{i}": t.contiguous().clone() for i, t in enumerate(expected)},
              os.path.join(out_dir, "expected.safetensors"))
    meta = {"name": name, "torch": torch.__version__, "seed": seed,
            "outputs": len(expected), "tolerance": tol}
    if notes:
        meta["notes"] = notes
    if extra_meta:
        meta.update(extra_meta)
    with open(os.path.join(out_dir, "meta.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    pt2 = os.path.join(out_dir, "model.pt2")
    if save_pt2:
        # Drop node metadata that varies run to run (object ids in from_node) or names local
        # paths (stack_trace), so that model.pt2 is reproducible byte for byte.
        for n in ep.graph.nodes:
            for k in _UNSTABLE_META:
                n.meta.pop(k, None)
        torch.export.save(ep, pt2)
    elif os.path.exists(pt2):
        os.remove(pt2)
    return g


def dump_registered(name: str, out_dir, *, seed: Optional[int] = None,
                    save_pt2: Optional[bool] = None) -> Dict[str, Any]:
    from . import models

    spec = models.REGISTRY[name]
    seed = models.DEFAULT_SEED if seed is None else seed
    model, inputs = models.build(name, seed)
    return dump(model, inputs, out_dir, name=name, seed=seed,
                save_pt2=spec.save_pt2 if save_pt2 is None else save_pt2,
                tolerance=spec.tolerance, notes=spec.notes, extra_meta=spec.extra_meta)


def main(argv=None):
    from . import models

    p = argparse.ArgumentParser(prog="python -m fxhlo.dump", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, choices=sorted(models.REGISTRY),
                   help="registered model name (fxhlo.models)")
    p.add_argument("--out", required=True, help="output folder")
    p.add_argument("--pt2", action="store_true", help="also write model.pt2")
    p.add_argument("--seed", type=int, default=None)
    a = p.parse_args(argv)
    g = dump_registered(a.model, a.out, seed=a.seed, save_pt2=True if a.pt2 else None)
    print(f"{a.model}: {len(g['inputs'])} inputs, {len(g['nodes'])} nodes, "
          f"{len(g['outputs'])} outputs -> {a.out}")


if __name__ == "__main__":
    main()
