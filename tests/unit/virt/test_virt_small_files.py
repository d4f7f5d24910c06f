"""The small files a spawn writes: ``write_atomically`` (guest records, node XML), the
image cache's ``file_lock`` and ``InstanceFiles.make_dir`` (issue 16: each trimmed to
the system calls it needs; these say what they still guarantee)."""

from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from virt.atomic_write import write_atomically
from virt.libvirt.imagecache import file_lock
from virt.libvirt.instance_files import InstanceFiles


def _temporaries(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_write_atomically_replaces_the_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    write_atomically(target, "first ünïcode\n")
    write_atomically(target, "second")
    assert target.read_text(encoding="utf-8") == "second"
    assert _temporaries(tmp_path) == []
    assert target.stat().st_mode & 0o777 == 0o600  # as mkstemp made it


def test_write_atomically_overwrites_a_temporary_left_by_a_crash(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    left = tmp_path / f".record.json.{os.getpid()}.{threading.get_ident()}.tmp"
    left.write_text("x" * 10_000, encoding="utf-8")
    write_atomically(target, "whole")
    assert target.read_text(encoding="utf-8") == "whole"
    assert not left.exists()


def test_a_failed_atomic_write_keeps_the_old_file_and_leaves_no_temporary(
    tmp_path: Path,
) -> None:
    target = tmp_path / "record"
    target.mkdir()  # os.replace cannot put a file over a directory
    with pytest.raises(OSError):
        write_atomically(target, "new")
    assert target.is_dir()
    assert _temporaries(tmp_path) == []


def test_threads_writing_one_file_never_leave_half_of_it(tmp_path: Path) -> None:
    target = tmp_path / "record.json"
    contents = [str(n) * 50_000 for n in range(4)]
    threads = [
        threading.Thread(target=lambda c=c: [write_atomically(target, c) for _ in range(20)])
        for c in contents
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert target.read_text(encoding="utf-8") in contents
    assert _temporaries(tmp_path) == []


def test_file_lock_makes_its_directory_and_excludes_another_holder(tmp_path: Path) -> None:
    path = tmp_path / "locks" / "image-cache-x"
    order: list[str] = []
    with file_lock(path):
        other = threading.Thread(target=lambda: _take(path, order))
        other.start()
        other.join(timeout=0.2)
        order.append("first released")
    other.join()
    assert path.is_file()
    assert order == ["first released", "second took it"]


def _take(path: Path, order: list[str]) -> None:
    with file_lock(path):
        order.append("second took it")


def test_make_dir_says_whether_it_made_the_directory(tmp_path: Path) -> None:
    files = InstanceFiles(tmp_path / "not-yet" / "instances")
    assert files.make_dir("u1") is True  # instances_path made too
    assert files.make_dir("u1") is False
    assert files.path("u1").is_dir()


def test_make_dir_refuses_a_file_in_the_directorys_place(tmp_path: Path) -> None:
    files = InstanceFiles(tmp_path)
    files.path("u1").write_text("not a directory", encoding="utf-8")
    with pytest.raises(FileExistsError):
        files.make_dir("u1")
