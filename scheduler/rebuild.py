"""The scheduler's check of a rebuild with a new image (Nova's conductor with the
``_nova_check_type = rebuild`` hint): the server's own host, no claim, only the filters
Nova marks ``RUN_ON_REBUILD`` (those that read the image), so a host that cannot run the
new image refuses the rebuild before its guest is touched."""

from __future__ import annotations

from compute.instance_state import get_instance
from compute.sessions import Sessions
from scheduler.candidates import load_candidates
from scheduler.filters import run_filters
from scheduler.manager import Scheduler
from scheduler.report import no_valid_host
from scheduler.request_spec import RequestSpec

#: Nova's filters with ``RUN_ON_REBUILD = True``; every other filter is skipped.
RUN_ON_REBUILD = frozenset(
    {"ImagePropertiesFilter", "IsolatedHostsFilter", "AggregateImagePropertiesIsolation"}
)


def check_rebuild(scheduler: Scheduler, sessions: Sessions, instance_uuid: str) -> str:
    """The server's host, if it passes the rebuild filters with the server's (new) image;
    else ``NoValidHost`` naming the filter that refused."""
    with sessions(read_only=True) as session:
        instance = get_instance(session, instance_uuid)
        host, node = instance.host or "", instance.node or ""
        spec = RequestSpec.from_dict(
            {
                **(instance.request_spec or {}),
                "instance_uuid": instance_uuid,
                "flavor": instance.flavor,
            }
        )
        candidates = load_candidates(session, scheduler.settings, None, (host,))
    hosts = [h for h in candidates.hosts if (h.host, h.nodename) == (host, node)]
    filters = [f for f in scheduler.filters if f.name in RUN_ON_REBUILD]
    passing, report = run_filters(filters, hosts, spec)
    if not passing:
        facts = () if hosts else (f"host {host} not found",)
        raise no_valid_host(report, facts)
    return host
