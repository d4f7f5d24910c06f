"""libvirt domain lifecycle events turned into ``virt.event.LifecycleEvent`` for compute
(Nova's ``nova/virt/libvirt/host.py`` event handling).

Owns the translation of libvirt's events and the dispatch: libvirt calls back on its
event loop's thread (``host.start_event_loop``), which must never wait on a database,
so an event is queued and a dispatcher thread hands it to the listener. As Nova does, a
STOPPED event is held back ``delay_s`` (15 s) and dropped if any other event of the same
guest comes first: a reboot stops and starts the guest, and the STOPPED alone would make
compute believe the guest went down. Refuses to decide what an event means for an
instance (``compute.lifecycle_events`` does).

libvirt events and what they become (``virt.event``):

===================  ===========  ==============================================
libvirt              transition   why
===================  ===========  ==============================================
STARTED              STARTED
STOPPED              STOPPED      (held back ``delay_s``)
CRASHED              STOPPED      the guest is down; the sync reads CRASHED
SUSPENDED            PAUSED       libvirt's "suspended" is a paused guest
RESUMED              RESUMED
PMSUSPENDED          SUSPENDED    the guest suspended itself (ACPI S3)
SHUTDOWN             —            the guest is going down; a STOPPED follows
DEFINED, UNDEFINED   —            configuration, not power
===================  ===========  ==============================================
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Final

from virt import event as virtevent
from virt.libvirt.host import Host

LOG = logging.getLogger(__name__)

#: Nova's ``_lifecycle_delay``: how long a STOPPED event waits for a cancelling event.
LIFECYCLE_DELAY_S: Final = 15.0

# libvirt's virDomainEventType values (libvirt-domain.h; stable ABI, copied so that only
# ``host`` imports libvirt).
VIR_DOMAIN_EVENT_DEFINED: Final = 0
VIR_DOMAIN_EVENT_UNDEFINED: Final = 1
VIR_DOMAIN_EVENT_STARTED: Final = 2
VIR_DOMAIN_EVENT_SUSPENDED: Final = 3
VIR_DOMAIN_EVENT_RESUMED: Final = 4
VIR_DOMAIN_EVENT_STOPPED: Final = 5
VIR_DOMAIN_EVENT_SHUTDOWN: Final = 6
VIR_DOMAIN_EVENT_PMSUSPENDED: Final = 7
VIR_DOMAIN_EVENT_CRASHED: Final = 8

_TRANSITIONS: Final[dict[int, int]] = {
    VIR_DOMAIN_EVENT_STARTED: virtevent.STARTED,
    VIR_DOMAIN_EVENT_STOPPED: virtevent.STOPPED,
    VIR_DOMAIN_EVENT_CRASHED: virtevent.STOPPED,
    VIR_DOMAIN_EVENT_SUSPENDED: virtevent.PAUSED,
    VIR_DOMAIN_EVENT_RESUMED: virtevent.RESUMED,
    VIR_DOMAIN_EVENT_PMSUSPENDED: virtevent.SUSPENDED,
}

Listener = Callable[[virtevent.LifecycleEvent], None]


def transition_of(libvirt_event: int) -> int | None:
    """The ``virt.event`` transition of a libvirt domain event, or None to ignore it."""
    return _TRANSITIONS.get(libvirt_event)


class EventDispatcher:
    """Hands queued events to ``listener`` on its own thread, STOPPED ones ``delay_s`` late
    unless a later event of the same guest cancels them. A listener's error is logged."""

    def __init__(self, listener: Listener, delay_s: float = LIFECYCLE_DELAY_S) -> None:
        self.listener = listener
        self.delay_s = delay_s
        self._queue: queue.Queue[virtevent.LifecycleEvent | None] = queue.Queue()
        self._delayed: dict[str, tuple[float, virtevent.LifecycleEvent]] = {}
        self._thread = threading.Thread(target=self._run, name="lifecycle-events", daemon=True)
        self._thread.start()

    def put(self, event: virtevent.LifecycleEvent) -> None:
        self._queue.put(event)

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop dispatching; events still held back are dropped (the periodic sync stays)."""
        self._queue.put(None)
        self._thread.join(timeout_s)

    def _run(self) -> None:
        while True:
            try:
                event = self._queue.get(timeout=self._wait_s())
            except queue.Empty:
                self._emit_due()
                continue
            if event is None:
                return
            self._accept(event)
            self._emit_due()

    def _wait_s(self) -> float | None:
        if not self._delayed:
            return None
        first = min(due for due, _event in self._delayed.values())
        return max(0.0, first - time.monotonic())

    def _accept(self, event: virtevent.LifecycleEvent) -> None:
        if self._delayed.pop(event.uuid, None) is not None:
            LOG.debug("guest %s: held-back Stopped event cancelled by %s", event.uuid, event.name)
        if event.transition == virtevent.STOPPED:
            self._delayed[event.uuid] = (time.monotonic() + self.delay_s, event)
        else:
            self._emit(event)

    def _emit_due(self) -> None:
        now = time.monotonic()
        for uuid, (due, event) in list(self._delayed.items()):
            if due <= now:
                del self._delayed[uuid]
                self._emit(event)

    def _emit(self, event: virtevent.LifecycleEvent) -> None:
        try:
            self.listener(event)
        except Exception:  # noqa: BLE001 - one event must not stop the others
            LOG.exception("guest %s: handling the %s event failed", event.uuid, event.name)


class DomainEventSource:
    """The lifecycle events of one libvirt connection, translated and dispatched."""

    def __init__(self, host: Host, listener: Listener, delay_s: float = LIFECYCLE_DELAY_S):
        self._host = host
        self._dispatcher = EventDispatcher(listener, delay_s)
        self._callback_id = host.register_lifecycle_callback(self._on_libvirt_event)

    def _on_libvirt_event(self, uuid: str, libvirt_event: int, detail: int) -> None:
        transition = transition_of(libvirt_event)
        LOG.debug("guest %s: libvirt event %s/%s", uuid, libvirt_event, detail)
        if transition is not None:
            self._dispatcher.put(virtevent.LifecycleEvent(uuid, transition))

    def close(self) -> None:
        try:
            self._host.deregister_callback(self._callback_id)
        except Exception:  # noqa: BLE001 - a closed connection has no subscription left
            LOG.debug("deregistering lifecycle events failed", exc_info=True)
        self._dispatcher.stop()
