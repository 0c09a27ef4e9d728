"""Freezing for inference: a module's parameters and buffers become constants of the program.

Under ``torch.no_grad()`` / ``torch.inference_mode()`` aot_autograd hands the backend an
inference graph whose first inputs are the module's parameters and buffers (Dynamo marks them
static: ``fw_metadata.static_input_indices``).  Passed as inputs, fxhlo sees them only at run
time: weights are repacked on every call and batch norms cannot be folded into convolutions.
Frozen, they are constants of the fxhlo program (as Inductor's ``freezing`` and OpenVINO's
backend do): folded, prepacked and laid out once, at compile time.

A frozen weight must never be silently stale.  Dynamo does not guard parameters by value, so
every call checks that each frozen input is the same tensor (``data_ptr``, shape, strides) at
the same version counter (``_version``, which every in-place op and ``copy_`` bumps) as when it
was compiled; if one changed, the graph is compiled again without freezing (one
:class:`FxhloFallbackWarning`) and runs unfrozen from then on.  Writes through ``.data`` do not
bump the version counter (as for autograd's checks and Inductor's freezing): after
``p.data.copy_(...)``, call ``torch._dynamo.reset()``.

Only parameters and module buffers are frozen, never an input the graph mutates (a KV cache
updated in place) nor other static tensors (``torch._dynamo.mark_static_address``).  The
option ``freezing=False`` turns it off; graphs that need gradients are never frozen.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, List, Optional, Sequence, Tuple

import torch
import torch.fx


@dataclass
class FrozenInput:
    """One input of the inference graph compiled as a constant, and how to tell that it is
    still the value that was compiled."""

    index: int
    tensor: torch.Tensor
    data_ptr: int
    shape: Tuple[int, ...]
    stride: Tuple[int, ...]
    version: int

    @staticmethod
    def of(index: int, t: torch.Tensor) -> "FrozenInput":
        return FrozenInput(index, t, t.data_ptr(), tuple(t.shape), tuple(t.stride()), t._version)

    def unchanged(self, a: Any) -> bool:
        """Whether ``a`` (the argument of a call) is the frozen value: the same memory, layout
        and version as when it was compiled."""
        return (isinstance(a, torch.Tensor) and a.data_ptr() == self.data_ptr
                and a._version == self.version and tuple(a.shape) == self.shape
                and tuple(a.stride()) == self.stride)


def _is_param_or_buffer(node: Optional[torch.fx.Node], value: Any) -> bool:
    """A module parameter or buffer (not a tensor the user marked static, such as a KV cache's
    storage, nor a graph input)."""
    if isinstance(value, torch.nn.Parameter):
        return True
    grapharg = node.meta.get("grapharg") if node is not None else None
    source = getattr(grapharg, "source", None)
    if source is None:
        return False
    name = getattr(source, "name", "")  # a property (a method in older torch)
    name = name() if callable(name) else str(name)
    return "._buffers[" in name or "._parameters[" in name


def static_tensors(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> List[Tuple[int, torch.Tensor]]:
    """The Dynamo graph's inputs that are module parameters or buffers: ``(index, tensor)``.
    Empty when grad mode is on (training and graphs that need gradients are not frozen)."""
    if torch.is_grad_enabled():
        return []
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(phs) != len(example_inputs):
        return []
    out = []
    for i, (n, v) in enumerate(zip(phs, example_inputs)):
        if (isinstance(v, torch.Tensor) and v.device.type == "cpu" and not v.is_sparse
                and getattr(v, "_dynamo_static_input_type", None) is not None
                and _is_param_or_buffer(n, v)):
            out.append((i, v))
    return out


def plan(aot_gm: torch.fx.GraphModule, dynamo_static: List[Tuple[int, torch.Tensor]]) -> List[FrozenInput]:
    """Which inputs of aot_autograd's inference graph ``aot_gm`` to freeze.

    aot_autograd's flat inputs are its own lifted parameters (``params_flat``, when Dynamo did
    not inline the module) followed by the Dynamo graph's inputs; ``fw_metadata`` says which
    it mutates.  Returns [] when the layout is not that (the graph is then compiled unfrozen).
    """
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    if meta is None:
        return []
    params = [p for p in (ctx.params_flat or [])]
    phs = [n for n in aot_gm.graph.nodes if n.op == "placeholder"]
    if len(meta.input_info) != len(phs):
        return []
    candidates = [(i, p) for i, p in enumerate(params) if isinstance(p, torch.Tensor)]
    candidates += [(len(params) + i, t) for i, t in dynamo_static]
    frozen = []
    for i, t in candidates:
        if i >= len(phs):
            return []
        info = meta.input_info[i]
        if info.mutates_data or info.mutates_metadata or getattr(info, "mutates_storage_metadata", False):
            continue
        val = phs[i].meta.get("val")
        if not isinstance(val, torch.Tensor) or tuple(val.shape) != tuple(t.shape) or val.dtype != t.dtype:
            return []
        frozen.append(FrozenInput.of(i, t))
    return frozen


def freeze_graph(gm: torch.fx.GraphModule, frozen: List[FrozenInput]) -> Tuple[torch.fx.GraphModule, List[int]]:
    """A copy of ``gm`` whose frozen placeholders are ``get_attr`` constants holding the
    tensors (shared, not copied), and the indices of the inputs it still takes.  The
    constants are also set on ``gm`` (under names no graph uses), so that the copy, made from
    ``gm`` as its root, finds them with the graph's own constants."""
    graph = torch.fx.Graph()
    env = {}
    idx = {f.index: f for f in frozen}
    kept = []
    k = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            f = idx.get(k)
            if f is not None:
                attr = f"_fxhlo_frozen_{k}"
                gm.register_buffer(attr, f.tensor.detach(), persistent=False)
                new = graph.get_attr(attr)
            else:
                kept.append(k)
                new = graph.placeholder(n.target)
            new.meta = dict(n.meta)
            k += 1
        else:
            new = graph.node_copy(n, lambda a: env[a])
        env[n] = new
    return torch.fx.GraphModule(gm, graph), kept


class FrozenGraph:
    """Runs a graph compiled with frozen inputs (boxed: one list of the graph's inputs): the
    frozen ones are checked and dropped.  If one changed since compilation, ``unfreeze()``
    gives the graph compiled without freezing, which runs from then on."""

    def __init__(self, compiled: Callable, kept: List[int], frozen: List[FrozenInput],
                 unfreeze: Callable[[str], Callable]):
        self._boxed_call = True
        self.compiled = compiled
        self.kept = kept
        self.frozen = frozen
        self.unfreeze = unfreeze
        self.unfrozen: Optional[Callable] = None

    def __call__(self, args):
        if self.unfrozen is None:
            for f in self.frozen:
                a = args[f.index]
                if not f.unchanged(a):
                    what = ("was modified in place" if isinstance(a, torch.Tensor)
                            and a.data_ptr() == f.data_ptr else "was replaced")
                    self.unfrozen = self.unfreeze(
                        f"frozen input {f.index} (a parameter or buffer, "
                        f"{list(f.shape)}) {what} after compilation")
                    self.frozen = []
                    self.compiled = None
                    break
            else:
                return self.compiled([args[i] for i in self.kept])
        return self.unfrozen(args)
