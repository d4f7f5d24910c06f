"""How Flower is started, and the refusal to expose it unauthenticated.

Flower can run any task (``POST /api/task/async-apply/<task>``), revoke tasks, restart pools
and shrink workers, so it is never served without authentication, not even on loopback
(where any local user could reach it):

- with ``[flower] basic_auth`` set, those credentials are used; that is also the only way
  to serve Flower on a non-loopback address;
- without it, each run of the launcher generates an operator credential
  (``operator:<random>``), kept in ``<state_dir>/flower-credentials`` (0600), which the
  launcher names but never prints.

The credentials go to Flower through the ``FLOWER_BASIC_AUTH`` environment variable (Flower
reads any option from ``FLOWER_<OPTION>``), never through argv, so that they do not show in
``ps`` or in the launcher's logs.

Flower 2.2 cannot switch its task-running API off: its ``read_only`` option guards only the
worker-control API (pool restart, shutdown, rate limits), not ``/api/task/apply``,
``async-apply``, ``send-task``, ``revoke`` or ``abort``. Basic auth in front of every
handler is the control; an unauthenticated request gets 401.

Not covered, by Flower's design: ``/metrics`` and ``/healthcheck`` stay open even with basic
auth (``shared/reference/CELERY_RELIABILITY.md`` 4.2); they show counts and liveness, and run
nothing.
"""

from __future__ import annotations

import contextlib
import ipaddress
import secrets
import socket
from collections.abc import Sequence
from pathlib import Path

from novaq.exceptions import ConfigError, ServiceUnavailable
from novaq.launcher.private_files import make_private_dir, write_private_text
from novaq.settings import Settings

#: How many ports after a taken one are tried before giving up.
PORT_ATTEMPTS = 100

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
BASIC_AUTH_OPTION = "[flower] basic_auth (NOVAQ_FLOWER__BASIC_AUTH)"
OPERATOR_USER = "operator"
CREDENTIALS_FILE = "flower-credentials"


def is_loopback(address: str) -> bool:
    """True for ``localhost``, 127.0.0.0/8 and ``::1`` (with or without brackets).

    Any other name is treated as public: it may resolve to anything. The empty string
    means "every interface" to Flower, so it is not loopback either.
    """
    host = address.strip().strip("[]").lower()
    if host in ("localhost", "localhost.", "ip6-localhost"):
        return True
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


def flower_command(
    settings: Settings, celery_argv: Sequence[str] = ("celery",)
) -> tuple[list[str], dict[str, str]]:
    """The argv that runs Flower, and the environment variables to add to the child's.

    ``celery_argv`` is how to invoke celery (the cluster passes ``python -m celery``).
    Raises ``ConfigError`` for a non-loopback address without basic auth. Without basic
    auth on loopback, the run's operator credential is used (created if there is none yet).
    """
    flower = settings.flower
    secret = configured_basic_auth(settings)
    if not secret and not is_loopback(flower.address):
        raise ConfigError(
            option=BASIC_AUTH_OPTION,
            reason=f"Flower would listen on {flower.address or 'every interface'!r}, which is "
            "not a loopback address, without authentication; set user:password, or "
            "[flower] address = '127.0.0.1'",
        )
    if secret and not all(":" in entry for entry in secret.split(",")):
        raise ConfigError(
            option=BASIC_AUTH_OPTION,
            reason="expected user:password (several joined with ','); the value is not shown",
        )
    argv = [
        *celery_argv,
        "-A",
        "tasks",
        "flower",
        f"--address={flower.address}",
        f"--port={flower.port}",
    ]
    if not secret:
        secret = operator_credential(settings)
    # NOTE: never FLOWER_UNAUTHENTICATED_API: with basic auth the API needs the credential.
    return argv, {BASIC_AUTH_ENV: secret}


def configured_basic_auth(settings: Settings) -> str:
    """``[flower] basic_auth``'s value, or "" when it is not set."""
    basic_auth = settings.flower.basic_auth
    return basic_auth.get_secret_value() if basic_auth else ""


def credentials_path(settings: Settings) -> Path | None:
    """Where the generated operator credential lives; None when basic_auth is configured."""
    if configured_basic_auth(settings):
        return None
    return settings.state_dir.resolve() / CREDENTIALS_FILE


def new_operator_credential(settings: Settings) -> Path | None:
    """Generate this run's ``operator:<random>`` credential into its 0600 file.

    Returns the file, or None when ``[flower] basic_auth`` is configured (nothing is
    generated then). A new run gets a new password, so a leaked one dies with its run.
    """
    path = credentials_path(settings)
    if path is None:
        return None
    make_private_dir(path.parent)
    write_private_text(path, f"{OPERATOR_USER}:{secrets.token_urlsafe(24)}\n")
    return path


def operator_credential(settings: Settings) -> str:
    """The generated ``user:password`` (generating it if no run has yet)."""
    path = credentials_path(settings)
    if path is None:
        return configured_basic_auth(settings)
    if not path.is_file():
        new_operator_credential(settings)
    return path.read_text(encoding="utf-8").strip()


def flower_url(settings: Settings) -> str:
    """The address to browse to; an "every interface" address shows as 127.0.0.1."""
    host = settings.flower.address.strip().strip("[]") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.flower.port}"


def port_is_free(address: str, port: int) -> bool:
    """Whether Flower could listen on ``address:port`` now: bound as Tornado binds
    (``SO_REUSEADDR``, so a port in TIME_WAIT counts as free, as it is to Flower)."""
    host = address.strip().strip("[]")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)  # fmt: skip
    except socket.gaierror:
        return False
    for family, kind, proto, _, sockaddr in infos:
        with contextlib.closing(socket.socket(family, kind, proto)) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                sock.bind(sockaddr)
            except OSError:
                return False
    return True


def with_free_flower_port(settings: Settings) -> tuple[Settings, int | None]:
    """``settings`` with ``[flower] port`` moved to the next free port when it is taken
    (returned second: the port that was taken), else ``settings`` unchanged and None.

    NOTE: checked just before Flower starts; another program can still take the port in
    between, in which case Flower dies and the supervisor says so.
    """
    flower = settings.flower
    if flower.port == 0 or port_is_free(flower.address, flower.port):
        return settings, None
    last = min(flower.port + PORT_ATTEMPTS, 65535)
    for port in range(flower.port + 1, last + 1):
        if port_is_free(flower.address, port):
            moved = flower.model_copy(update={"port": port})
            return settings.model_copy(update={"flower": moved}), flower.port
    raise ServiceUnavailable(
        service="Flower",
        reason=f"port {flower.port} on {flower.address!r} and the next {last - flower.port} are "
        "taken; set [flower] port (NOVAQ_FLOWER__PORT)",
    )
