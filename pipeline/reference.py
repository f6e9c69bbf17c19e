"""The DGI reference direction μ̂ shipped for the default encoder.

μ̂ is the normalised mean of unit displacements φ(r) − φ(q) over verified grounded pairs;
it lives in the default policy file, fitted and recorded by `groundstream calibrate`.
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=1)
def _default() -> tuple[float, ...]:
    from pipeline.policy import load_policy

    reference = load_policy().reference
    if reference is None:
        raise LookupError("the default policy carries no reference direction (reference.dgi_mu)")
    return reference


def default_reference() -> np.ndarray:
    """μ̂ from the active policy (GROUNDSTREAM_POLICY, else the shipped default), float64."""
    return np.array(_default(), dtype=np.float64)
