"""When a launcher's group is ready: every worker of its plan answers a broadcast ping,
Flower, when the plan runs it, has heard each of them (``flower_probe``: else it would
miss the first steps of what comes next), and every server of the plan
(``ProcessSpec.listens``, the image endpoint) accepts connections (a first boot would
otherwise find its image unreachable).

``ProcessGroup.wait_ready`` waits for it and fails fast: a child that exits meanwhile,
or a part that is not ready in time, raises ``ServiceUnavailable`` with the log tails of
the children concerned (no restart: a child that dies before it first answers is a
broken setting or install, which a restart would only repeat). ``run_forever``'s
announcer asks :meth:`Readiness.ready_now` until it holds, then prints the ready line.
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from celery import Celery
from kombu.exceptions import OperationalError

from novaq.exceptions import ServiceUnavailable
from novaq.launcher.children import Child
from novaq.launcher.specs import FLOWER

LOG = logging.getLogger(__name__)

#: How often the waits look again at Flower and at the servers (a ping waits a second
#: for its replies already).
FLOWER_POLL_S = 0.5
LISTEN_POLL_S = 0.2


@dataclass(frozen=True, slots=True)
class Readiness:
    """The readiness of one group's running children (``children``: as they are now)."""

    #: The group's name in its errors ("novaq cluster").
    label: str
    broker_url: str
    children: Callable[[], Sequence[Child]]
    #: The worker names Flower has heard (``flower_probe.workers_heard``); None when the
    #: plan runs no Flower.
    flower_heard: Callable[[], set[str]] | None

    @property
    def nodes(self) -> set[str]:
        """The worker node names that must answer a ping."""
        return {child.spec.node for child in self.children() if child.spec.node}

    def wait(self, timeout_s: float) -> None:
        """Return once the group is ready; raise ``ServiceUnavailable`` when a child exits
        first, or when a part is not ready within ``timeout_s``."""
        expected = self.nodes
        deadline = time.monotonic() + timeout_s
        app = self.probe_app("novaq-cluster-probe")
        missing = expected
        try:
            while True:
                self.raise_if_a_child_exited()
                missing = expected - ping(app)
                if not missing or time.monotonic() >= deadline:
                    break
        finally:
            app.close()
        if missing:
            raise self._not_answering(missing, timeout_s)
        while not self._flower_hears(expected):
            self.raise_if_a_child_exited()
            if time.monotonic() >= deadline:
                raise self._flower_deaf(expected, timeout_s)
            time.sleep(FLOWER_POLL_S)
        while silent := self.not_listening():
            self.raise_if_a_child_exited()
            if time.monotonic() >= deadline:
                raise self._silent(silent, timeout_s)
            time.sleep(LISTEN_POLL_S)

    def ready_now(self, app: Celery) -> bool:
        """Whether the group is ready at this moment (``app``: a probe's, on the broker)."""
        expected = self.nodes
        return expected <= ping(app) and self._flower_hears(expected) and not self.not_listening()

    def probe_app(self, name: str = "novaq-cluster-ready") -> Celery:
        """A Celery app on the group's broker, only to ping its workers (close it after)."""
        return Celery(name, broker=self.broker_url, set_as_current=False)

    def not_listening(self) -> dict[str, tuple[str, int]]:
        """The servers of the plan that accept no connection, by name."""
        listens = {c.spec.name: c.spec.listens for c in self.children() if c.spec.listens}
        return {name: at for name, at in listens.items() if not accepts(at)}

    def raise_if_a_child_exited(self) -> None:
        for child in self.children():
            if not child.alive():
                raise self._unavailable(
                    f"{child.name} exited with status {child.proc.returncode} "
                    f"(log: {child.log_path}):\n{child.tail()}"
                )

    # -- internals -------------------------------------------------------------------------
    def _flower_hears(self, nodes: set[str]) -> bool:
        return self.flower_heard is None or nodes <= self.flower_heard()

    def _not_answering(self, missing: set[str], timeout_s: float) -> ServiceUnavailable:
        tails = "\n".join(_tail(child) for child in self.children() if child.spec.node in missing)
        return self._unavailable(
            f"{', '.join(sorted(missing))} did not answer a ping within {timeout_s:g} s\n{tails}"
        )

    def _flower_deaf(self, nodes: set[str], timeout_s: float) -> ServiceUnavailable:
        tails = "".join(f"\n{_tail(child)}" for child in self.children() if child.name == FLOWER)
        return self._unavailable(
            f"Flower had no events from {', '.join(sorted(nodes))} within {timeout_s:g} s{tails}"
        )

    def _silent(self, names: dict[str, tuple[str, int]], timeout_s: float) -> ServiceUnavailable:
        where = ", ".join(f"{name} on {host}:{port}" for name, (host, port) in names.items())
        tails = "".join(f"\n{_tail(child)}" for child in self.children() if child.name in names)
        return self._unavailable(f"{where} accepted no connection within {timeout_s:g} s{tails}")

    def _unavailable(self, reason: str) -> ServiceUnavailable:
        return ServiceUnavailable(service=self.label, reason=reason)


def _tail(child: Child) -> str:
    return f"--- {child.name} ({child.log_path}):\n{child.tail()}"


def accepts(address: tuple[str, int]) -> bool:
    """Whether a server accepts a TCP connection at ``address`` (closed at once)."""
    try:
        with socket.create_connection(address, timeout=1.0):
            return True
    except OSError:
        return False


def ping(app: Celery) -> set[str]:
    """The node names that answer a broadcast ping within a second."""
    try:
        replies = app.control.ping(timeout=1.0)
    except OperationalError as exc:  # the broker is not reachable (yet)
        LOG.debug("ping failed: %s", exc)
        time.sleep(0.5)
        return set()
    return {node for reply in replies for node in reply}
