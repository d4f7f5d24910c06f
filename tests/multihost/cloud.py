"""A novaq cloud of several machines on one box: a controller machine whose address
carries the database and the broker, controllers (``novaq controller``: scheduler,
standby-capable beat, Flower, image endpoint on the machine's address) and compute machines
(``novaq compute --host``), each in its own network namespace under its own hostname, with
its own state directory, instances directory and simulated hypervisor, and nothing in
common with the others but what it reaches over the network (the controllers' image
endpoints serve one image store, the API's, as Glance's shared backend would).

The test process plays the API: it runs in the root namespace and talks to the same
servers on loopback. Everything is undone by :meth:`Cloud.destroy`, which the fixture runs
whatever the test did.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.integration.workers import Worker
from tests.multihost import roles
from tests.multihost.forwarder import Forwarder, Keepalive
from tests.multihost.netns import Machine, Network

CONTROLLER = "ctl"
#: The controller's ports, each forwarded to the same port on loopback.
SERVICE_PORTS = {"postgresql": 5432, "redis": 6379, "rabbitmq": 5672}
IMAGE_PORT = 9292  # Glance's


class NotReady(AssertionError):
    pass


def wait_until(what: str, check: Callable[[], Any], timeout_s: float = 60) -> Any:
    """``check()``'s first true value, polled until ``timeout_s``; fails naming ``what``."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise NotReady(f"timed out after {timeout_s:.0f}s waiting for {what}")
        time.sleep(0.5)


@dataclass
class Cloud:
    network: Network
    base: Path
    #: URL templates with ``{address}`` for the controller's address (broker, database).
    broker_url: str
    database_url: str
    #: Options every machine gets (the tier's short timings).
    common_env: dict[str, str]
    processes: dict[str, Worker] = field(default_factory=dict)
    forwarders: list[Forwarder] = field(default_factory=list)
    #: The controllers' machines, in the order they were added (the compute machines'
    #: ``[glance] api_servers`` name their image endpoints in that order).
    controllers: list[str] = field(default_factory=list)
    #: Each compute machine's own extra settings, kept for its restart.
    compute_extras: dict[str, tuple[str, dict[str, str]]] = field(default_factory=dict)

    @classmethod
    def create(
        cls, base: Path, broker_url: str, database_url: str, common_env: dict[str, str]
    ) -> Cloud:
        cloud = cls(Network.create(), base, broker_url, database_url, common_env)
        try:
            controller = cloud.network.add(CONTROLLER)
            for service, port in SERVICE_PORTS.items():
                # The database's server ends a dead machine's session (forwarder.py).
                keepalive = Keepalive.of_novaq_sessions() if service == "postgresql" else None
                forwarder = Forwarder(
                    controller.namespace, controller.address, port, port, keepalive
                )
                forwarder.start()
                cloud.forwarders.append(forwarder)
        except BaseException:
            cloud.destroy()
            raise
        return cloud

    @property
    def controller(self) -> Machine:
        return self.network.machines[CONTROLLER]

    def home(self, name: str) -> Path:
        return self.base / name

    def image_server(self, name: str) -> str:
        """The image endpoint of controller ``name``."""
        return f"http://{self.network.machines[name].address}:{IMAGE_PORT}"

    # -- machines and their roles --------------------------------------------------------

    def _env(self, name: str, **extra: str) -> dict[str, str]:
        home = self.home(name)
        address = self.controller.address
        env = dict(
            self.common_env,
            NOVAQ_STATE_DIR=str(home / "state"),
            NOVAQ_BROKER_URL=self.broker_url.format(address=address),
            NOVAQ_DATABASE_URL=self.database_url.format(address=address),
        )
        env.update(extra)
        return env

    def _start(
        self, key: str, role: str, machine: Machine, argv: list[str], env: dict[str, str]
    ) -> Worker:
        former = self.processes.get(key)
        if former is not None:  # a machine's role started again: the old one ends (reaped)
            former.stop()
        log = self.home(machine.name) / f"{role}.log"
        process = roles.start(machine, machine.name, argv, env, log)
        self.processes[key] = process
        return process

    def add_controller(self, name: str, image_store: Path) -> Worker:
        """``novaq controller`` on machine ``name`` (made unless it exists): its scheduler
        worker ``scheduler@<name>``, a beat that takes the lease or stands by, Flower on
        the machine's loopback, and its image endpoint serving ``image_store`` on the
        machine's address."""
        machine = self.network.machines.get(name) or self.network.add(name)
        if name not in self.controllers:
            self.controllers.append(name)
        env = self._env(name, NOVAQ_HOST=name, NOVAQ_GLANCE__STORE_PATH=str(image_store))
        argv = roles.controller_argv(self.home(name) / "state", machine.address, IMAGE_PORT)
        return self._start(name, "controller", machine, argv, env)

    def add_compute(
        self, host: str, extra_toml: str = "", extra_env: dict[str, str] | None = None
    ) -> Worker:
        """A compute machine named ``host`` running one compute worker for ``host``; its
        simulated hypervisor and instances directory are its own. ``extra_toml`` and
        ``extra_env`` are more of its settings (e.g. a disk transport's listener on its
        ``address`` for moves between machines)."""
        machine = self.network.machines.get(host) or self.network.add(host)
        self.compute_extras[host] = (extra_toml, dict(extra_env or {}))
        home = self.home(host)
        home.mkdir(parents=True, exist_ok=True)
        config = home / "novaq.toml"
        config.write_text(
            f'[[hosts]]\nname = "{host}"\nhost_ip = "{machine.address}"\n\n'
            f'[libvirt]\ninstances_path = "{home / "instances"}"\n\n{extra_toml}'
        )
        env = self._env(
            host,
            NOVAQ_CONFIG=str(config),
            NOVAQ_GLANCE__API_SERVERS=",".join(self.image_server(c) for c in self.controllers),
            **(extra_env or {}),
        )
        argv = roles.compute_argv(host, home / "state")
        return self._start(host, "compute", machine, argv, env)

    def restart_compute(self, host: str) -> Worker:
        """The compute worker of ``host`` started again (its machine back from a reboot):
        whatever still runs in its namespace is killed first."""
        roles.power_off(self.network.machines[host])
        extra_toml, extra_env = self.compute_extras[host]
        return self.add_compute(host, extra_toml, extra_env)

    def power_off(self, name: str) -> None:
        """Every process of machine ``name`` SIGKILLed at once."""
        roles.power_off(self.network.machines[name])

    def wait_ready(self, nodes: set[str], timeout_s: float = 90) -> None:
        """Until every worker node in ``nodes`` answers a ping over the broker."""
        from tasks import app

        def answered() -> bool:
            for key, process in self.processes.items():
                if not process.alive():
                    raise NotReady(f"{key} exited:\n{process.tail()}")
            try:
                replies = app.control.ping(timeout=1) or []
            except OSError:
                return False
            return nodes <= {name for reply in replies for name in reply}

        wait_until(f"workers {sorted(nodes)}", answered, timeout_s)

    # -- the end -------------------------------------------------------------------------

    def logs(self) -> str:
        return "\n".join(
            f"--- {key} ({p.name}):\n{p.tail(1500)}" for key, p in self.processes.items()
        )

    def destroy(self, keep_logs: Path | None = None) -> None:
        """Everything undone; the machines' logs copied to ``keep_logs`` first if given."""
        if keep_logs is not None:
            for process in self.processes.values():
                target = keep_logs / process.name / process.log.name
                target.parent.mkdir(parents=True, exist_ok=True)
                with contextlib.suppress(OSError):
                    shutil.copyfile(process.log, target)
        for process in self.processes.values():
            with contextlib.suppress(OSError):
                process.stop(timeout_s=5)
        self.network.destroy()  # kills whatever is left in the namespaces
        for forwarder in self.forwarders:
            forwarder.close()
        shutil.rmtree(self.base, ignore_errors=True)
