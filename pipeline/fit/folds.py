"""The cross-validation split every fit shares: scikit-learn's `GroupKFold` over a key per row.

Rows that share a key (a context: six answers to one document, or a right and a wrong
answer to one passage) always fall in the same fold, so no fold is scored by a model that
saw its source. The groups are shuffled with a fixed seed before they are dealt out, so
the folds do not follow the order of the keys' names and the same data always gives the
same folds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from sklearn.model_selection import GroupKFold

__all__ = ["FOLD_SEED", "group_folds"]

FOLD_SEED = 0
"""The seed of `GroupKFold`'s shuffle of the groups: fixed, so a fit is reproducible."""


def group_folds(keys: Sequence[str], folds: int) -> np.ndarray:
    """Each row's fold, 0 .. `folds` - 1, rows sharing a key in one fold. With fewer
    distinct keys than `folds` each key is a fold of its own and the later folds are
    empty (the callers skip a fold with nothing to test); with one key every row is in
    fold 0."""
    key = np.asarray(keys, dtype=str).reshape(-1)
    out = np.zeros(key.size, dtype=np.int64)
    splits = min(int(folds), len(np.unique(key)))
    if splits < 2:
        return out
    split = GroupKFold(n_splits=splits, shuffle=True, random_state=FOLD_SEED)
    for k, (_, test) in enumerate(split.split(np.zeros((key.size, 1)), groups=key)):
        out[test] = k
    return out
