"""``novaq image-endpoint``: the controller's image endpoint in the foreground.

It serves ``GET /images/<image id>`` (the image store's file, ``[glance] store_path``) to
requests signed with ``[transfer] secret``, which compute hosts whose ``[glance]
api_servers`` names it make (``virt.transfer``). ``novaq controller`` runs this command
as one of its children.
"""

from __future__ import annotations

import click

from novaq.cli.base import handle_errors, main


@main.command("image-endpoint")
@click.option(
    "--address",
    default="0.0.0.0",
    show_default=True,
    help="Address to listen on.",  # noqa: S104
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=9292,
    show_default=True,
    help="Port to listen on (Glance's; 0: any free port).",
)
@handle_errors
def image_endpoint(address: str, port: int) -> None:
    """Serve the image store to compute hosts (signed GET /images/<id>) until stopped."""
    from compute.transfer import bind_image_endpoint
    from novaq.exceptions import ConfigError
    from novaq.settings import load_settings

    settings = load_settings()
    try:
        server = bind_image_endpoint(settings, address, port)
    except OSError as exc:
        raise ConfigError(option="--address/--port", reason=f"cannot listen: {exc}") from exc
    store = settings.image_store_path.resolve()
    click.echo(f"image endpoint serving {store} at {server.url}", err=False)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
