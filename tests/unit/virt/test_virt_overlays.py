"""``virt.libvirt.overlays``: an overlay of a kind already made is the first one's bytes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.disk_images import MIB, qemu_img_info
from virt.libvirt import qemu_img
from virt.libvirt.overlays import OverlayMaker


@pytest.fixture
def created(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, ...]]:
    """The ``qemu_img.create`` calls (each still run)."""
    calls: list[tuple[Any, ...]] = []
    real_create = qemu_img.create

    def counting_create(path: Path, *args: Any) -> None:
        calls.append(args)
        real_create(path, *args)

    monkeypatch.setattr(qemu_img, "create", counting_create)
    return calls


def _base(tmp_path: Path, name: str = "base") -> Path:
    base = tmp_path / name
    base.write_bytes(b"\0" * MIB)
    return base


def test_the_same_kind_is_made_once_by_qemu_img_and_copied_after(
    tmp_path: Path, created: list[tuple[Any, ...]]
) -> None:
    maker, base = OverlayMaker(), _base(tmp_path)

    for name in ("a", "b", "c"):
        maker.create(tmp_path / name, 2 * MIB, base, "raw")

    assert created == [(2 * MIB, base, "raw")]
    assert (tmp_path / "b").read_bytes() == (tmp_path / "a").read_bytes()
    assert (tmp_path / "c").read_bytes() == (tmp_path / "a").read_bytes()
    info = qemu_img_info(tmp_path / "c")
    assert (info["format"], info["virtual-size"], info["backing-filename"]) == (
        "qcow2",
        2 * MIB,
        str(base),
    )


def test_a_copy_is_what_qemu_img_would_have_made(tmp_path: Path) -> None:
    maker, base = OverlayMaker(), _base(tmp_path)
    maker.create(tmp_path / "first", 3 * MIB, base, "raw")
    maker.create(tmp_path / "copied", 3 * MIB, base, "raw")

    qemu_img.create(tmp_path / "direct", 3 * MIB, base, "raw")

    assert (tmp_path / "copied").read_bytes() == (tmp_path / "direct").read_bytes()


def test_another_size_base_or_format_is_another_kind(
    tmp_path: Path, created: list[tuple[Any, ...]]
) -> None:
    maker, base, other = OverlayMaker(), _base(tmp_path), _base(tmp_path, "other")

    maker.create(tmp_path / "a", 2 * MIB, base, "raw")
    maker.create(tmp_path / "b", 4 * MIB, base, "raw")
    maker.create(tmp_path / "c", 2 * MIB, other, "raw")

    assert len(created) == 3
    assert qemu_img_info(tmp_path / "b")["virtual-size"] == 4 * MIB
    assert qemu_img_info(tmp_path / "c")["backing-filename"] == str(other)


def test_a_base_replaced_in_place_is_asked_again(
    tmp_path: Path, created: list[tuple[Any, ...]]
) -> None:
    maker, base = OverlayMaker(), _base(tmp_path)
    maker.create(tmp_path / "a", 2 * MIB, base, "raw")

    replacement = _base(tmp_path, ".replacement")
    replacement.replace(base)  # a new inode under the same name, as the image cache does
    maker.create(tmp_path / "b", 2 * MIB, base, "raw")

    assert len(created) == 2


def test_only_the_most_recently_used_kinds_are_kept(
    tmp_path: Path, created: list[tuple[Any, ...]]
) -> None:
    maker, base = OverlayMaker(kept=2), _base(tmp_path)

    for n, size_mib in enumerate((1, 2, 1, 3, 2, 1)):
        maker.create(tmp_path / str(n), size_mib * MIB, base, "raw")

    # 1, 2 made; 1 kept (used); 3 made, 2 goes; 2 made again, 1 goes; 1 made again.
    assert [args[0] // MIB for args in created] == [1, 2, 3, 2, 1]


def test_a_failed_first_make_keeps_nothing(tmp_path: Path) -> None:
    maker = OverlayMaker()

    with pytest.raises(FileNotFoundError):
        maker.create(tmp_path / "a", MIB, tmp_path / "missing", "raw")

    assert not (tmp_path / "a").exists()
