"""nbhelpers.atomic: a write replaces the file whole or leaves the old one, and leaves no temporary file."""
import os
from unittest import mock

import pytest

from nbhelpers.atomic import write_atomic


def test_a_write_replaces_the_file_and_sets_its_mode(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    assert write_atomic(target, b"new", mode=0o600) == target
    assert target.read_bytes() == b"new" and (target.stat().st_mode & 0o777) == 0o600
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_a_failed_write_keeps_the_old_file_and_leaves_nothing_behind(tmp_path):
    target = tmp_path / "f.bin"
    target.write_bytes(b"old")
    with mock.patch("os.fsync", side_effect=OSError("disk full")), pytest.raises(OSError, match="disk full"):
        write_atomic(target, b"new")
    assert target.read_bytes() == b"old" and [p.name for p in tmp_path.iterdir()] == ["f.bin"]


def test_the_temporary_file_is_beside_the_target(tmp_path):
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.dirname(src))
        real_replace(src, dst)

    with mock.patch("os.replace", spy):
        write_atomic(tmp_path / "f.bin", b"x")
    assert seen == [str(tmp_path)]                 # one rename, on one file system
