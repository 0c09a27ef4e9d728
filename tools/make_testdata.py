#!/usr/bin/env python3
"""(Re)generate testdata/<model>/ for every model in fxhlo.models.REGISTRY.

    PYTHONPATH=python python tools/make_testdata.py [--out testdata] [model ...]

Deterministic: every model is built from torch.manual_seed(DEFAULT_SEED).
"""
import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "python"))

import torch  # noqa: E402

from fxhlo import models  # noqa: E402
from fxhlo.dump import dump_registered  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.path.join(ROOT, "testdata"))
    p.add_argument("models", nargs="*", help="subset of models (default: all)")
    a = p.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    names = a.models or list(models.REGISTRY)
    for name in names:
        t0 = time.time()
        g = dump_registered(name, os.path.join(a.out, name))
        print(f"{name:22s} {len(g['nodes']):4d} nodes  {len(g['inputs']):3d} inputs  "
              f"{len(g['outputs'])} outputs  ({time.time() - t0:.1f}s)", flush=True)


if __name__ == "__main__":
    main()
