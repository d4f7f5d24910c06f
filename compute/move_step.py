"""How a move step runs on the step runner (``compute.steps``): its context (a step
context with the migration), its ``Step`` shape (wherever the instance is recorded,
whatever its task_state, the action left open, a conflict re-raised for the errback)
and what several move steps share."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from compute import instance_actions as actions
from compute.guest import guest_spec as build_guest_spec
from compute.migrations import get_migration
from compute.move_failures import MOVE_TASK_STATES
from compute.steps import Act, Final, Step, StepContext, StepRun, close_event, run_step
from models import Instance
from models.flavor import FlavorSnapshot
from virt.driver import GuestSpec

LOG = logging.getLogger(__name__)


def guest_spec(
    session: Session, instance: Instance, flavor: FlavorSnapshot, addresses: list[str]
) -> GuestSpec:
    return build_guest_spec(session, instance, tuple(addresses), flavor)


@dataclass(frozen=True, slots=True)
class MoveContext(StepContext):
    """A move step's context: a host step's (transactions, driver, host, request,
    ``shutdown_timeout``) and the migration it works on."""

    migration_uuid: str = ""


def migration_of(run: StepRun) -> str:
    return str(run.params["migration_uuid"])


def run_move(ctx: MoveContext, step: Step) -> None:
    """Run a move step on the migration's instance. Unlike a power operation, a move
    step never skips: a conflict fails it (its errback, ``abort_move``, ends the move)."""
    with ctx.sessions() as session:
        instance_uuid = get_migration(session, ctx.migration_uuid).instance_uuid
    run_step(ctx, step, instance_uuid, migration_uuid=ctx.migration_uuid)


def close_failed(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """Close the failed step's event, not the move's action: the move may go on (a
    prep_resize rescheduled to an alternate); what ends it (``abort_move``) ends that."""
    if run.event_id is not None:
        result, tb, details = actions.outcome(exc)
        with ctx.sessions() as session:
            actions.finish_event(session, run.event_id, result, tb, details)


def reraise_conflict(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    close_event(ctx, run, exc)
    raise exc


def take_down_guest(ctx: StepContext, run: StepRun, exc: BaseException) -> None:
    """The server was deleted while its guest was starting: take the guest down again so
    nothing runs for a server that no longer exists (as a build does)."""
    LOG.info("Instance %s was deleted during a move; destroying its new guest", run.instance_uuid)
    ctx.driver.destroy(run.instance_uuid)
    reraise_conflict(ctx, run, exc)


def move_step(name: str, task: str, act: Act, final: Final, **options: Any) -> Step:
    """A move step: its event ``compute_<name>``, run wherever the instance is recorded,
    whatever its task_state unless ``options`` say otherwise (the step's own
    compare-and-swaps check it), its action left open at the end unless it is the step
    that ends the request (``finish_action=True``); a failure closes the event and is
    re-raised."""
    options.setdefault("undo", close_failed)
    options.setdefault("finish_action", False)
    options.setdefault("on_superseded", reraise_conflict)
    options.setdefault("any_task", True)
    return Step(
        name,
        f"compute_{name}",
        task,
        MOVE_TASK_STATES,
        act,
        final,
        check_host=False,
        skip_deleted=False,
        read_power=False,
        **options,
    )


def drop_files_unless_same_host(ctx: StepContext, run: StepRun) -> None:
    """Nova's ``_cleanup_resize`` / revert cleanup: the side the server left keeps no
    instance directory (a same-host resize shares it, so it stays)."""
    with ctx.sessions() as session:
        migration = get_migration(session, migration_of(run))
        same_host = migration.source_compute == migration.dest_compute
    if not same_host:
        ctx.driver.delete_instance_files(run.instance_uuid)
