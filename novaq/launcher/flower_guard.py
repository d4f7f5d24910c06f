"""How Flower is started, and the refusal to expose it unauthenticated.

Flower can revoke tasks, restart pools and shrink workers, so it is never served on a
non-loopback address without ``[flower] basic_auth``. The credentials go to Flower through
the ``FLOWER_BASIC_AUTH`` environment variable (Flower reads any option from
``FLOWER_<OPTION>``), never through argv, so that they do not show in ``ps`` or in the
launcher's logs.

Not covered, by Flower's design: ``/metrics`` and ``/healthcheck`` stay open even with basic
auth (``shared/reference/CELERY_RELIABILITY.md`` 4.2), hence the loopback default.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence

from novaq.exceptions import ConfigError
from novaq.settings import Settings

BASIC_AUTH_ENV = "FLOWER_BASIC_AUTH"
BASIC_AUTH_OPTION = "[flower] basic_auth (NOVAQ_FLOWER__BASIC_AUTH)"


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
    Raises ``ConfigError`` for a non-loopback address without basic auth.
    """
    flower = settings.flower
    secret = flower.basic_auth.get_secret_value() if flower.basic_auth else ""
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
    # NOTE: Flower 2.x refuses its HTTP API without authentication unless told otherwise;
    # on loopback with no credentials configured, the API is as open as the UI.
    extra_env = {BASIC_AUTH_ENV: secret} if secret else {"FLOWER_UNAUTHENTICATED_API": "true"}
    return argv, extra_env


def flower_url(settings: Settings) -> str:
    """The address to browse to; an "every interface" address shows as 127.0.0.1."""
    host = settings.flower.address.strip().strip("[]") or "127.0.0.1"
    if host in ("0.0.0.0", "::"):
        host = "127.0.0.1"
    if ":" in host:
        host = f"[{host}]"
    return f"http://{host}:{settings.flower.port}"
