"""``novaq image-create/-list/-show/-delete`` through click's runner, on the unit
database and image store."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from novaq.cli import main
from tests.factories import CIRROS_ID, write_raw_image
from tests.unit.cli import novaq_json as _run


@pytest.fixture
def image_file(tmp_path: Path, db_url: str) -> Iterator[Path]:
    yield write_raw_image(tmp_path / "disk.raw")


def test_image_create_list_show_and_delete(image_file: Path) -> None:
    created = _run(
        "image-create",
        "debian",
        "--file",
        str(image_file),
        "--disk-format",
        "raw",
        "--min-ram",
        "256",
        "--property",
        "hw_architecture=x86_64",
        "--property",
        "os_shutdown_timeout=30",
    )
    assert created["status"] == "active" and created["min_ram"] == 256
    assert created["properties"] == {"hw_architecture": "x86_64", "os_shutdown_timeout": "30"}

    assert [i["name"] for i in _run("image-list")] == ["cirros", "debian"]
    assert _run("image-show", "debian")["id"] == created["id"]

    table = CliRunner().invoke(main, ["image-show", created["id"]])
    assert table.exit_code == 0 and "os_hash_value" in table.output

    assert _run("image-delete", "debian")["status"] == "deleted"
    assert [i["id"] for i in _run("image-list")] == [CIRROS_ID]
    assert {i["name"] for i in _run("image-list", "--deleted")} == {"cirros", "debian"}


def test_image_commands_report_errors_as_one_line_and_exit_1(image_file: Path) -> None:
    runner = CliRunner()
    missing = runner.invoke(main, ["image-show", "nope"])
    assert missing.exit_code == 1 and "Image nope could not be found." in missing.output

    wrong = runner.invoke(
        main, ["image-create", "x", "--file", str(image_file), "--disk-format", "qcow2"]
    )
    assert wrong.exit_code == 1 and "InvalidImage" in wrong.output

    bad_prop = runner.invoke(
        main,
        ["image-create", "x", "--file", str(image_file), "--disk-format", "raw"]
        + ["--property", "hw_vm_mode"],
    )
    assert bad_prop.exit_code == 2 and "is not KEY=VALUE" in bad_prop.output

    bad_format = runner.invoke(
        main, ["image-create", "x", "--file", str(image_file), "--disk-format", "vmdk"]
    )
    assert bad_format.exit_code == 2
    assert [i["name"] for i in _run("image-list")] == ["cirros"]
