"""The image registry: create (copied into the store, SHA-256 and size recorded, format
and virtual size read with qemu-img), list, show, delete; every refusal leaves neither a
row nor a file behind."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import func, select

from compute.images import image_spec
from models import Image
from models.db import session_scope
from novaq.exceptions import ImageNotFound, ImageStoreError, InvalidImage, InvalidInput
from novaq.settings import get_settings
from tests.factories import CIRROS_ID, write_qcow2_image, write_raw_image
from workflows import api


def _store() -> Path:
    return get_settings().image_store_path.resolve()


def _stored_files() -> set[str]:
    """The store's files other than the shared "cirros" test image."""
    return {p.name for p in _store().iterdir() if p.name != CIRROS_ID}


def _rows(db_url: str) -> int:
    with session_scope(db_url) as session:
        return int(session.scalar(select(func.count()).select_from(Image)) or 0)


@pytest.fixture
def raw_file(tmp_path: Path) -> Path:
    path = write_raw_image(tmp_path / "disk.raw", 2 * 1024 * 1024)
    with path.open("r+b") as f:  # not all zeros, so the checksum means something
        f.write(b"novaq image data")
    return path


@pytest.fixture
def clean_store() -> Any:
    before = _stored_files()
    yield
    for name in _stored_files() - before:
        (_store() / name).unlink()


def test_create_image_copies_the_data_and_records_checksum_size_and_virtual_size(
    db_url: str, raw_file: Path, clean_store: None
) -> None:
    image = api.create_image(
        "debian",
        path=str(raw_file),
        disk_format="raw",
        min_disk=1,
        min_ram=256,
        properties={"hw_architecture": "x86_64", "os_shutdown_timeout": "30"},
    )

    assert image["status"] == "active"
    assert image["size"] == image["virtual_size"] == 2 * 1024 * 1024
    assert image["os_hash_algo"] == "sha256"
    assert image["os_hash_value"] == hashlib.sha256(raw_file.read_bytes()).hexdigest()
    assert (image["container_format"], image["min_disk"], image["min_ram"]) == ("bare", 1, 256)
    stored = Path(image["location"])
    assert stored == _store() / image["id"] and stored.read_bytes() == raw_file.read_bytes()
    assert api.show_image("debian") == api.show_image(image["id"]) == image
    assert [i["name"] for i in api.list_images()] == ["cirros", "debian"]


def test_a_qcow2_image_records_the_virtual_size_its_header_declares(
    db_url: str, tmp_path: Path, clean_store: None
) -> None:
    qcow2 = write_qcow2_image(tmp_path / "disk.qcow2", "3G")

    image = api.create_image("q", path=str(qcow2), disk_format="qcow2")

    assert image["virtual_size"] == 3 * 1024**3
    assert image["size"] == qcow2.stat().st_size < image["virtual_size"]


@pytest.mark.parametrize(
    ("claimed", "make", "actual"),
    [
        ("qcow2", lambda p: write_raw_image(p), "raw"),
        ("raw", lambda p: write_qcow2_image(p), "qcow2"),
    ],
)
def test_data_not_in_the_format_it_claims_is_refused_and_nothing_is_kept(
    db_url: str, tmp_path: Path, clean_store: None, claimed: str, make: Any, actual: str
) -> None:
    path = make(tmp_path / "disk")

    with pytest.raises(InvalidImage, match=f"the data is in {actual} format"):
        api.create_image("liar", path=str(path), disk_format=claimed)

    assert _rows(db_url) == 1  # only cirros
    assert _stored_files() == set()


def test_a_qcow2_with_a_backing_file_is_refused(
    db_url: str, tmp_path: Path, clean_store: None
) -> None:
    import subprocess

    base = write_raw_image(tmp_path / "base.raw")
    overlay = tmp_path / "overlay.qcow2"
    subprocess.run(
        ["qemu-img", "create", "-q", "-f", "qcow2", "-b", str(base), "-F", "raw", str(overlay)],
        check=True,
    )
    with pytest.raises(InvalidImage, match="backing file"):
        api.create_image("overlay", path=str(overlay), disk_format="qcow2")
    assert _rows(db_url) == 1 and _stored_files() == set()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"name": ""}, "name must be a non-empty string"),
        ({"name": 7}, "name must be a non-empty string"),
        ({"path": None}, "path must name a local file"),
        ({"path": "/no/such/file"}, "no such file"),
        ({"disk_format": "vmdk"}, "disk_format must be one of raw, qcow2"),
        ({"disk_format": None}, "disk_format must be one of raw, qcow2"),
        ({"container_format": "docker"}, "container_format must be one of bare, ovf"),
        ({"min_disk": -1}, "min_disk must be an integer >= 0"),
        ({"min_ram": "512"}, "min_ram must be an integer >= 0"),
        ({"min_ram": True}, "min_ram must be an integer >= 0"),
        ({"properties": ["a"]}, "properties must be a mapping"),
        ({"properties": {"hw_vm_mode": 1}}, "property hw_vm_mode must be a string"),
        ({"properties": {3: "x"}}, "property name 3 must be a non-empty string"),
        ({"properties": {"hw_architecture": "z80"}}, "hw_architecture='z80' is not one of"),
        ({"properties": {"img_hv_type": "kvm2"}}, "img_hv_type='kvm2' is not one of"),
        ({"properties": {"hw_vm_mode": "paravirt"}}, "hw_vm_mode='paravirt' is not one of"),
        ({"properties": {"hw_rescue_device": "tape"}}, "hw_rescue_device='tape' is not one"),
        ({"properties": {"hw_rescue_bus": "pci"}}, "hw_rescue_bus='pci' is not one of"),
        ({"properties": {"os_shutdown_timeout": "-5"}}, "must be an integer >= 0"),
        ({"properties": {"os_shutdown_timeout": "soon"}}, "must be an integer >= 0"),
        # Nova's image metadata refuses these hypervisor version requirements.
        ({"properties": {"img_hv_requested_version": "8.2"}}, "'8.2' is not '<op> <version>'"),
        ({"properties": {"img_hv_requested_version": "= 6.0"}}, "is not '<op> <version>'"),
        ({"properties": {"img_hv_requested_version": ">= six"}}, "'six' is not a version"),
        ({"image_id": "not-a-uuid"}, "image id must be a UUID"),
        ({"image_id": CIRROS_ID}, f"an image with id {CIRROS_ID} already exists"),
    ],
)
def test_create_image_refuses_bad_input_and_writes_nothing(
    db_url: str, raw_file: Path, clean_store: None, kwargs: dict[str, Any], message: str
) -> None:
    args: dict[str, Any] = {"name": "img", "path": str(raw_file), "disk_format": "raw"}
    args.update(kwargs)
    with pytest.raises(InvalidImage, match=message):
        api.create_image(**args)
    assert _rows(db_url) == 1 and _stored_files() == set()


def test_known_properties_accept_nova_values_and_aliases(
    db_url: str, raw_file: Path, clean_store: None
) -> None:
    props = {
        "hw_architecture": "amd64",
        "img_hv_type": "qemu",
        "hw_vm_mode": "hvm",
        "hw_rescue_device": "cdrom",
        "hw_rescue_bus": "ide",
        "os_shutdown_timeout": "0",
        "os_distro": "debian",
        "img_hv_requested_version": ">= 6.0rc1, < 9",
    }
    image = api.create_image("props", path=str(raw_file), disk_format="raw", properties=props)
    assert image["properties"] == props


def test_without_qemu_img_create_image_is_a_clear_error_and_keeps_nothing(
    db_url: str, raw_file: Path, clean_store: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(ImageStoreError, match="qemu-img is not installed"):
        api.create_image("img", path=str(raw_file), disk_format="raw")
    assert _rows(db_url) == 1 and _stored_files() == set()


def test_an_image_id_may_be_chosen(db_url: str, raw_file: Path, clean_store: None) -> None:
    wanted = "0b0b0b0b-1111-4222-8333-444444444444"
    image = api.create_image("chosen", path=str(raw_file), disk_format="raw", image_id=wanted)
    assert image["id"] == wanted and api.show_image(wanted)["name"] == "chosen"


def test_a_name_shared_by_several_images_is_refused_naming_them(
    db_url: str, raw_file: Path, clean_store: None
) -> None:
    first = api.create_image("twin", path=str(raw_file), disk_format="raw")
    second = api.create_image("twin", path=str(raw_file), disk_format="raw")

    with pytest.raises(InvalidInput, match="Multiple image matches found for 'twin'") as err:
        api.show_image("twin")
    assert first["id"] in str(err.value) and second["id"] in str(err.value)
    assert api.show_image(second["id"])["id"] == second["id"]


def test_unknown_images_are_not_found(db_url: str) -> None:
    with pytest.raises(ImageNotFound, match="Image nope could not be found."):
        api.show_image("nope")
    with pytest.raises(ImageNotFound):
        api.delete_image("9b9b9b9b-1111-4222-8333-444444444444")
    with pytest.raises(InvalidInput):
        api.show_image(None)  # type: ignore[arg-type]


def test_delete_image_marks_it_deleted_and_removes_its_data(
    db_url: str, raw_file: Path, clean_store: None
) -> None:
    image = api.create_image("gone", path=str(raw_file), disk_format="raw")

    deleted = api.delete_image("gone")

    assert deleted["status"] == "deleted" and deleted["deleted_at"] is not None
    assert not Path(image["location"]).exists()
    assert [i["name"] for i in api.list_images()] == ["cirros"]
    assert [i["name"] for i in api.list_images(include_deleted=True)] == ["cirros", "gone"]
    with pytest.raises(ImageNotFound):
        api.show_image("gone")  # by name: live images only
    assert api.show_image(image["id"])["status"] == "deleted"
    with pytest.raises(ImageNotFound):
        api.delete_image(image["id"])
    # Servers booted from it keep resolving it (their hosts' _base copies remain).
    with session_scope(db_url) as session:
        spec = image_spec(session, image["id"])
    assert (spec.id, spec.checksum, spec.size) == (
        image["id"],
        image["os_hash_value"],
        image["size"],
    )


def test_a_purged_image_is_not_found_by_its_servers(db_url: str) -> None:
    with session_scope(db_url) as session:
        session.execute(Image.__table__.delete().where(Image.id == CIRROS_ID))
    with session_scope(db_url) as session, pytest.raises(ImageNotFound, match=CIRROS_ID):
        image_spec(session, CIRROS_ID)


def test_the_demo_image_is_registered_once(db_url: str, clean_store: None) -> None:
    from workflows.api.images import ensure_demo_image

    settings = get_settings()
    assert ensure_demo_image(settings) is None  # "cirros" exists already
    api.delete_image(CIRROS_ID)
    try:
        made = ensure_demo_image(settings)
        assert made is not None and (made["name"], made["status"]) == ("cirros", "active")
        assert made["virtual_size"] == 1024 * 1024
        assert ensure_demo_image(settings) is None
    finally:
        # The shared test data of "cirros" was removed with it: make it again.
        write_raw_image(_store() / CIRROS_ID)


@pytest.fixture
def http_dir(tmp_path: Path) -> Any:
    """A loopback HTTP server of ``tmp_path / "www"``; yields (directory, base URL)."""
    import http.server
    import threading

    root = tmp_path / "www"
    root.mkdir()

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, directory=str(root), **kwargs)

        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield root, f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()
    thread.join(5)


def test_create_image_fetches_an_http_url_into_the_store(
    db_url: str, http_dir: Any, clean_store: None
) -> None:
    root, base = http_dir
    data = write_qcow2_image(root / "disk.qcow2", "2G")

    image = api.create_image("web", path=f"{base}/disk.qcow2", disk_format="qcow2")

    assert (image["status"], image["virtual_size"]) == ("active", 2 * 1024**3)
    assert image["os_hash_value"] == hashlib.sha256(data.read_bytes()).hexdigest()
    assert Path(image["location"]).read_bytes() == data.read_bytes()


def test_a_url_that_cannot_be_fetched_is_refused_and_nothing_is_kept(
    db_url: str, http_dir: Any, clean_store: None
) -> None:
    _, base = http_dir
    with pytest.raises(InvalidImage, match="HTTP 404"):
        api.create_image("web", path=f"{base}/missing.raw", disk_format="raw")
    assert _rows(db_url) == 1 and _stored_files() == set()


def test_glance_store_path_chooses_the_stores_directory(
    db_url: str, raw_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from novaq.settings import Settings
    from workflows.api import images_store as store
    from workflows.api.images import register

    monkeypatch.setenv("NOVAQ_GLANCE__STORE_PATH", str(tmp_path / "elsewhere"))
    settings = Settings()
    assert settings.image_store_path == tmp_path / "elsewhere"
    upload = store.check_upload("x", raw_file, "raw", "bare", 0, 0, None)

    image = register(db_url, settings, upload, "7c7c7c7c-0000-4000-8000-000000000007")

    assert Path(image["location"]) == tmp_path / "elsewhere" / image["id"]
    assert get_settings().image_store_path != settings.image_store_path
