"""Console access tokens (Nova's ``ConsoleAuthToken``): a console URL carries a random
token; the database keeps only its SHA-256, the console's host and port, and when it
expires (epoch seconds, now + ``[consoleauth] token_ttl``). A console proxy hands the
token to :func:`validate_token` and connects to the host and port it gets back.

Where novaq differs from Nova, and why:

- Only the ``serial`` console type: novaq's guests have a serial console and no graphics
  device, so there is nothing for noVNC or SPICE to connect to.
- The port comes from the guest's domain XML when libvirt exposes the serial device on
  TCP (``<serial type='tcp'><source service='PORT'/>``, what Nova's serial console
  configures); novaq's guests use a ``pty`` serial device, which has no port, so the
  port is then ``SERIAL_PORT_BASE`` (the start of Nova's ``[serial_console] port_range``)
  plus the device's target port.
- Nova deletes an instance's tokens when the instance is deleted or moved. novaq checks
  the same thing when a token is validated: a token whose instance is gone, or no longer
  on the token's host, is refused. Expired rows are removed by
  ``_cleanup_expired_console_auth_tokens`` (``compute/periodic/consoles.py``).

The raw token is returned once, to the caller that asked for the console, and never
stored or logged.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from typing import Any

from lxml import etree
from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from compute.sessions import Sessions
from models import ConsoleAuthToken, Instance
from novaq.exceptions import InvalidInput, InvalidToken

LOG = logging.getLogger(__name__)

SERIAL = "serial"
CONSOLE_TYPES = (SERIAL,)
#: Nova's ``[serial_console] port_range`` starts here (10000:20000).
SERIAL_PORT_BASE = 10000
#: Nova's ``[serial_console] base_url`` default: where the serial console proxy listens.
SERIAL_BASE_URL = "ws://127.0.0.1:6083/"
#: 32 random bytes, URL-safe: as unguessable as Nova's uuid4 tokens, and then some.
TOKEN_BYTES = 32


def hash_token(token: str) -> str:
    """The SHA-256 hex digest stored in ``console_auth_tokens.token_hash``."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def now_ts() -> int:
    """Epoch seconds, the unit of ``console_auth_tokens.expires`` (Nova's ``utcnow_ts``)."""
    return int(time.time())


def check_console_type(console_type: str) -> None:
    if console_type not in CONSOLE_TYPES:
        raise InvalidInput(
            reason=f"console type {console_type!r} is not supported; novaq offers "
            + ", ".join(CONSOLE_TYPES)
        )


def create_console_token(
    sessions: Sessions,
    instance_uuid: str,
    host: str,
    port: int,
    console_type: str,
    token_ttl: int,
    access_url_base: str,
) -> str:
    """Store a new token for one console and return it (Nova's ``authorize``). The row
    expires ``token_ttl`` seconds from now."""
    check_console_type(console_type)
    token = secrets.token_urlsafe(TOKEN_BYTES)
    expires = now_ts() + token_ttl
    with sessions() as session:
        session.add(
            ConsoleAuthToken(
                token_hash=hash_token(token),
                console_type=console_type,
                host=host,
                port=port,
                internal_access_path=None,
                instance_uuid=instance_uuid,
                expires=expires,
                access_url_base=access_url_base,
            )
        )
    LOG.info(
        "Issued a %s console token for instance %s on %s:%d, expiring at %d",
        console_type,
        instance_uuid,
        host,
        port,
        expires,
    )
    return token


def access_url(access_url_base: str, token: str) -> str:
    """Nova's ``ConsoleAuthToken.access_url`` for every type but noVNC."""
    return f"{access_url_base}?token={token}"


def validate_token(sessions: Sessions, token: str) -> dict[str, Any]:
    """The console a token opens, as a dict, if the token is known, unexpired, and its
    instance still lives on the token's host; else ``InvalidToken``."""
    if not isinstance(token, str) or not token:
        raise InvalidToken(reason="no token given")
    with sessions() as session:
        row = session.scalars(
            select(ConsoleAuthToken).where(ConsoleAuthToken.token_hash == hash_token(token))
        ).first()
        if row is None:
            raise InvalidToken(reason="unknown token")
        if row.expires <= now_ts():
            raise InvalidToken(reason=f"it expired at {row.expires} (epoch seconds)")
        instance = session.scalars(
            select(Instance).where(Instance.uuid == row.instance_uuid, Instance.deleted == 0)
        ).first()
        if instance is None:
            raise InvalidToken(reason=f"instance {row.instance_uuid} was deleted")
        if instance.host != row.host:
            raise InvalidToken(reason=f"instance {row.instance_uuid} left host {row.host}")
        return token_dict(row)


def token_dict(row: ConsoleAuthToken) -> dict[str, Any]:
    """A token row without its hash (what a console proxy needs to connect)."""
    return {
        "instance_uuid": row.instance_uuid,
        "console_type": row.console_type,
        "host": row.host,
        "port": row.port,
        "internal_access_path": row.internal_access_path,
        "access_url_base": row.access_url_base,
        "expires": row.expires,
    }


def delete_expired_tokens(session: Session) -> int:
    """Delete every token with ``expires <= now``, on all hosts (Nova's
    ``console_auth_token_destroy_expired``); the number deleted."""
    result = session.execute(delete(ConsoleAuthToken).where(ConsoleAuthToken.expires <= now_ts()))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]  # a DML result is a CursorResult


def serial_port(domain_xml: str) -> int:
    """The TCP port of a guest's serial console: the ``service`` of a ``tcp`` serial
    device, else ``SERIAL_PORT_BASE`` + the target port of its first serial device
    (a ``pty`` device has no TCP port of its own)."""
    root = etree.fromstring(domain_xml.encode("utf-8"))
    for source in root.iterfind("devices/serial[@type='tcp']/source[@service]"):
        return int(source.get("service", "0"))
    target = root.find("devices/serial/target")
    if target is None:
        target = root.find("devices/console/target")
    offset = int(target.get("port", "0")) if target is not None else 0
    return SERIAL_PORT_BASE + offset
