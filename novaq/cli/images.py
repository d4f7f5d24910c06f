"""``novaq image-*``: the image registry (the glance client's verbs, as ``nova image-*``
used to offer them)."""

from __future__ import annotations

import click

from novaq.cli.base import api, handle_errors, json_option, main, render

LIST_COLUMNS = ("id", "name", "status", "disk_format", "size", "virtual_size")
SHOW_COLUMNS = (
    "id",
    "name",
    "status",
    "disk_format",
    "container_format",
    "size",
    "virtual_size",
    "os_hash_algo",
    "os_hash_value",
    "min_disk",
    "min_ram",
    "properties",
    "location",
    "created_at",
    "updated_at",
    "deleted_at",
)


def _properties(pairs: tuple[str, ...]) -> dict[str, str]:
    properties = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"{pair!r} is not KEY=VALUE", param_hint="--property")
        properties[key] = value
    return properties


@main.command("image-create")
@click.argument("name")
@click.option(
    "--file", "path", required=True, help="The image data: a local file or an http(s) URL."
)
@click.option("--disk-format", required=True, type=click.Choice(["raw", "qcow2"]))
@click.option("--container-format", default="bare", show_default=True)
@click.option("--min-disk", type=int, default=0, show_default=True, help="Minimum disk in GB.")
@click.option("--min-ram", type=int, default=0, show_default=True, help="Minimum memory in MB.")
@click.option("--id", "image_id", default=None, help="The image's id (default: a new UUID).")
@click.option(
    "--property",
    "properties",
    multiple=True,
    metavar="KEY=VALUE",
    help="Image property, e.g. hw_architecture=x86_64 (repeatable).",
)
@json_option
@handle_errors
def image_create(
    name: str,
    path: str,
    disk_format: str,
    container_format: str,
    min_disk: int,
    min_ram: int,
    image_id: str | None,
    properties: tuple[str, ...],
    as_json: bool,
) -> None:
    """Create an image from a local file (copied into the image store)."""
    image = api().create_image(
        name,
        path=path,
        disk_format=disk_format,
        container_format=container_format,
        min_disk=min_disk,
        min_ram=min_ram,
        properties=_properties(properties),
        image_id=image_id,
    )
    render(image, SHOW_COLUMNS, as_json)


@main.command("image-list")
@click.option("--deleted", is_flag=True, help="Include deleted images.")
@json_option
@handle_errors
def image_list(deleted: bool, as_json: bool) -> None:
    """List images."""
    render(api().list_images(include_deleted=deleted), LIST_COLUMNS, as_json)


@main.command("image-show")
@click.argument("image")
@json_option
@handle_errors
def image_show(image: str, as_json: bool) -> None:
    """Show IMAGE (a name or an id)."""
    render(api().show_image(image), SHOW_COLUMNS, as_json)


@main.command("image-delete")
@click.argument("image")
@json_option
@handle_errors
def image_delete(image: str, as_json: bool) -> None:
    """Delete IMAGE (a name or an id): marked deleted, its data removed from the store."""
    render(api().delete_image(image), SHOW_COLUMNS, as_json)
