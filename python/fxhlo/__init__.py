"""fxhlo: PyTorch core-ATen FX graphs -> StableHLO.

The Python side writes fxjson graphs and test tensors: ``fxhlo.dump`` (``from fxhlo.dump import
dump``; CLI ``python -m fxhlo.dump``) and ``fxhlo.models`` (the testdata model registry).
The format is specified in docs/graph-format.md.  Importing this package does not import torch.
"""

__version__ = "0.1.0"

try:  # the Rust extension, present when the package is installed (maturin build)
    from ._native import inspect, run_reference, supported_ops  # noqa: F401
except ImportError:  # running from a source checkout without the extension
    pass
