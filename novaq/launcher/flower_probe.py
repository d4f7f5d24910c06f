"""Whether Flower is watching the cluster yet.

Flower's web server answers before its event receiver has bound its queue to the events
exchange, and an event sent before that is lost (a fanout keeps nothing for a receiver
that is not there yet): the first steps of a scenario started as soon as Flower answered
would never show in it. Flower's worker list (``/workers?json=1``) is built from the
events it received, so a worker listed there is one whose task events it hears.
"""

from __future__ import annotations

import base64
import json
import urllib.request
from collections.abc import Iterable

#: Loopback only: never through a proxy from the environment.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def workers_heard(url: str, credential: str, timeout_s: float = 2.0) -> set[str]:
    """The worker names Flower at ``url`` has had events from (empty while it cannot
    answer). ``credential``: its ``user:password`` (the first, when several are set)."""
    request = urllib.request.Request(f"{url}/workers?json=1")
    token = base64.b64encode(credential.split(",")[0].encode()).decode()
    request.add_header("Authorization", f"Basic {token}")
    try:
        with _OPENER.open(request, timeout=timeout_s) as response:
            data = json.loads(response.read())
    except (OSError, ValueError):  # not listening yet, or not the answer of a ready Flower
        return set()
    return _hostnames(data.get("data", ()) if isinstance(data, dict) else ())


def _hostnames(workers: Iterable[object]) -> set[str]:
    return {str(w["hostname"]) for w in workers if isinstance(w, dict) and "hostname" in w}
