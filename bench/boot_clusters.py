"""The two clusters ``bench/boot_bench.py`` compares, both run by novaq's own launcher
(``novaq.launcher.cluster.Cluster``, what ``novaq up`` runs) with the worker layout of
``novaq/launcher/plan.py``: a scheduler worker (prefork) and one compute worker per host
(threads pool), with their concurrency from the settings.

- :func:`novaq_cluster`: novaq itself, each worker run through ``bench.sql_counts`` so its
  SQL is counted;
- :func:`bare_cluster`: the same processes with the same argv, running the bare app of
  ``bench/bare_app.py`` instead of ``tasks`` (on its own broker database).

Beat and Flower are left out of both: the figures are those of the boot path, not of the
periodic jobs beat would send meanwhile.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path

from bench import bare_app, sql_counts
from novaq.launcher.cluster import Cluster
from novaq.launcher.plan import CELERY_ARGV, ProcessSpec
from novaq.launcher.specs import IMAGE_ENDPOINT
from novaq.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
Respec = Callable[[ProcessSpec], ProcessSpec]


class WorkersOnly(Cluster):
    """``novaq up``'s cluster without beat and Flower, each worker's spec passed through
    ``respec``; with ``images``, its image endpoint too (novaq's hosts fetch the image
    from it; the bare app's have none to fetch)."""

    def __init__(
        self, settings: Settings, n_hosts: int, respec: Respec, images: bool, **kwargs: object
    ) -> None:
        super().__init__(settings, n_hosts=n_hosts, quiet=True, **kwargs)  # type: ignore[arg-type]
        self._respec_worker = respec
        self._images = images

    def plan(self, broker_url: str) -> list[ProcessSpec]:
        plan = super().plan(broker_url)
        workers = [self._respec_worker(spec) for spec in plan if spec.node]
        return workers + [spec for spec in plan if self._images and spec.name == IMAGE_ENDPOINT]


def _pythonpath(env: dict[str, str]) -> str:
    return os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH", "")) if p)


def _celery_args(spec: ProcessSpec) -> list[str]:
    """The worker's arguments after ``python -m celery``."""
    head = list(CELERY_ARGV)
    if spec.argv[: len(head)] != head:
        raise RuntimeError(f"unexpected worker command {spec.argv}")
    return spec.argv[len(head) :]


def novaq_cluster(settings: Settings, n_hosts: int, counts_dir: Path) -> Cluster:
    def counted(spec: ProcessSpec) -> ProcessSpec:
        argv = [CELERY_ARGV[0], "-m", "bench.sql_counts", *_celery_args(spec)]
        env = {
            **spec.env,
            sql_counts.DIR_ENV: str(counts_dir),
            "PYTHONPATH": _pythonpath(spec.env),
        }
        return dataclasses.replace(spec, argv=argv, env=env)

    return WorkersOnly(settings, n_hosts, counted, images=True)


def bare_cluster(
    settings: Settings,
    n_hosts: int,
    hosts: list[str],
    counts_dir: Path,
    durable: Mapping[str, str] | None = None,
) -> Cluster:
    """The bare app's workers; ``settings.broker_url`` is its broker database. They run
    through ``bench.sql_counts`` as novaq's do (no SQL to count: the CPU time of each step
    and of the rest of each process, written to ``counts_dir``). ``durable``: the durable
    bare app's environment (``bare_app.durable_env``'s URLs, ``bare_guest.DIR_ENV``)."""
    assert settings.broker_url

    def bare(spec: ProcessSpec) -> ProcessSpec:
        args = _celery_args(spec)
        args[args.index("-A") + 1] = "bench.bare_app"
        node = f"bare-{spec.node}"
        args[args.index("-n") + 1] = node
        env = {
            **spec.env,
            bare_app.BROKER_ENV: str(settings.broker_url),
            bare_app.HOSTS_ENV: ",".join(hosts),
            sql_counts.DIR_ENV: str(counts_dir),
            "PYTHONPATH": _pythonpath(spec.env),
            **(durable or {}),
        }
        argv = [CELERY_ARGV[0], "-m", "bench.sql_counts", *args]
        return dataclasses.replace(spec, name=f"bare-{spec.name}", argv=argv, env=env, node=node)

    return WorkersOnly(settings, n_hosts, bare, images=False, migrate=lambda _url: None)
