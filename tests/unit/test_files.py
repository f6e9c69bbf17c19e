"""`replaced_whole`: the target appears only whole, and only when its writer finished."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline.files import replaced_whole


def test_the_target_appears_when_the_block_ends(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "model.onnx"
    with replaced_whole(target) as tmp:
        tmp.write_bytes(b"graph")
        assert tmp.parent == target.parent and tmp != target
        assert not target.exists()  # a reader sees nothing until it is whole
    assert target.read_bytes() == b"graph" and not tmp.exists()


def test_a_failed_writer_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "ready.json"
    target.write_bytes(b"old")
    with pytest.raises(RuntimeError), replaced_whole(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("the writer died")
    assert target.read_bytes() == b"old"
