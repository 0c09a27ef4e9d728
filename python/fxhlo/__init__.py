"""fxhlo: PyTorch core-ATen FX graphs -> an optimizing compiler (StableHLO, fast CPU kernels).

* ``torch.compile(model, backend="fxhlo")``: the torch backend (``fxhlo.backend``), registered
  through the ``torch_dynamo_backends`` entry point, so no import of fxhlo is needed;
  see docs/torch-backend.md.
* ``fxhlo.dump`` (CLI ``python -m fxhlo.dump``) writes fxjson graphs and test tensors,
  ``fxhlo.models`` is the testdata model registry; the format is docs/graph-format.md.

Importing this package does not import torch.
"""

from typing import Any, Dict

__version__ = "0.1.0"

try:  # the Rust extension, present when the package is installed (maturin build)
    from ._native import (  # noqa: F401
        CompileError, ExecutionError, FxhloError, compile, inspect, load_artifact,
        run_reference, supported_ops,
    )
except ImportError:  # running from a source checkout without the extension
    pass


def stats() -> Dict[str, Any]:
    """The torch backend's counters in this process, as a dict: totals (graphs compiled,
    cache hits, compile seconds, fallbacks, ...) and ``graphs``: for each graph it received,
    its steps, the steps run on the reference interpreter with their reasons, the parts run
    in eager and why (docs/torch-backend.md).  ``fxhlo.runner.STATS.reset()`` zeroes them."""
    from .runner import STATS
    return STATS.as_dict()
