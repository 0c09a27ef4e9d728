"""The OpInfo samples fxhlo is known to fail (python -m fxhlo.opinfo; docs/opinfo.md).

``XFAIL[(opinfo, mode)] = reason``: some counted sample of that OpInfo in that mode does not
pass (unsupported op, compile error, mismatch or crash); ``XFAIL_SAMPLES`` names the samples.
python/tests/test_opinfo.py fails on a failure not listed here and on a listed pair whose
listed samples ran and all passed, so the list only shrinks.  ``python -m fxhlo.opinfo
--check-xfail`` checks it against a full run; ``--write-xfail`` rewrites it from one.
"""

from typing import Dict, Tuple

XFAIL: Dict[Tuple[str, str], str] = {
}

# the samples (indices) each pair failed on in the run that made the list
XFAIL_SAMPLES: Dict[Tuple[str, str], Tuple[int, ...]] = {
}
