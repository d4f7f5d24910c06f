"""CPU time counters of a simulated host (libvirt's ``test:///`` driver, ``virt.fake``).

libvirt's test driver answers ``virNodeGetCPUStats`` with four constants (user
9,797,400,000 ns, kernel 34,678,723,400,000 ns, idle 87,264,900,000 ns, iowait
763,600,000 ns): the same for every simulated host and never advancing, so a CPU monitor
would see every host 99 % busy in kernel mode, and no time passing between two readings.
A simulated host's counters come from this clock instead: its CPUs run from the moment
the driver opened, each running guest's vCPU keeps one host CPU busy in user mode
(never more than the host has), and the rest is idle; kernel and iowait time stay 0. So
``cpu.percent`` reads the share of the host's CPUs its running guests' vCPUs take.

Owns only arithmetic on elapsed time; what runs is the caller's to say.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable


class SimulatedCpuClock:
    """Cumulative user and idle nanoseconds of a simulated host's CPUs, accrued at each
    reading over the time since the previous one at the load given then."""

    def __init__(self, clock_ns: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock_ns = clock_ns
        self._lock = threading.Lock()
        self._last_ns = clock_ns()
        self._user_ns = 0
        self._idle_ns = 0

    def read(self, cpus: int, busy_vcpus: int) -> tuple[int, int]:
        """(user ns, idle ns) of the host's ``cpus`` CPUs so far, ``busy_vcpus`` (vCPUs of
        running guests) having kept that many of them busy since the last reading."""
        busy = max(0, min(cpus, busy_vcpus))
        with self._lock:
            now = self._clock_ns()
            elapsed = max(0, now - self._last_ns)
            self._last_ns = now
            self._user_ns += elapsed * busy
            self._idle_ns += elapsed * (cpus - busy)
            return self._user_ns, self._idle_ns
