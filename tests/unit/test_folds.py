"""pipeline.fit.folds: the cross-validation split every fit shares (scikit-learn's
GroupKFold by context)."""

from __future__ import annotations

import numpy as np

from pipeline.fit.folds import group_folds


def test_rows_sharing_a_key_share_a_fold() -> None:
    keys = [f"doc-{i // 6}" for i in range(600)]  # six answers to each document
    fold = group_folds(keys, 5)
    for key in set(keys):
        assert len({int(f) for f, k in zip(fold, keys, strict=True) if k == key}) == 1


def test_every_fold_is_used_and_none_dwarfs_another() -> None:
    fold = group_folds([f"doc-{i // 2}" for i in range(1000)], 5)
    sizes = np.bincount(fold, minlength=5)
    assert sizes.tolist() == [200] * 5  # 500 keys of two rows, dealt 100 to a fold


def test_the_same_keys_give_the_same_folds() -> None:
    keys = [f"ctx-{i % 37}" for i in range(200)]
    assert group_folds(keys, 5).tolist() == group_folds(list(keys), 5).tolist()


def test_the_folds_do_not_follow_the_order_of_the_names() -> None:
    # Shuffled before they are dealt: the first fifth of the names in sorted order do not
    # all land in one fold.
    keys = [f"doc-{i:03d}" for i in range(100)]
    fold = group_folds(keys, 5)
    assert len(set(fold[:20].tolist())) > 1


def test_fewer_keys_than_folds_give_a_fold_each() -> None:
    fold = group_folds(["a", "a", "b", "c"], 5)
    assert fold[0] == fold[1]
    assert len({int(f) for f in fold}) == 3
    assert set(fold.tolist()) <= set(range(5))


def test_one_key_is_one_fold() -> None:
    assert group_folds(["a"] * 4, 5).tolist() == [0, 0, 0, 0]
    assert group_folds([], 5).tolist() == []
