"""On a real cluster (issue 15, defects 2-4): a move no host can take ends ``wait`` and
``--wait`` at once with its fault, naming the deciding filter; a move to a host that does
not exist is refused with nothing written; a move that works ends its action at
VERIFY_RESIZE and confirm --wait returns once ACTIVE."""

from __future__ import annotations

import time

import pytest
from click.testing import CliRunner

from novaq.cli import main
from novaq.exceptions import ComputeHostNotFound, OperationFailed
from tests.integration.checks import assert_no_leaks, boot_active, flavor
from tests.integration.workers import Cluster
from workflows import api

pytestmark = pytest.mark.integration


def test_a_failed_move_ends_the_wait_at_once_and_a_good_one_ends_its_action(
    two_hosts: Cluster, cleanup: list[str]
) -> None:
    server = boot_active("mw", flavor("mw.small", 1, 512), cleanup)
    uuid, source = server["uuid"], server["host"]
    other = "host2" if source == "host1" else "host1"

    before = api.list_migrations(instance_uuid=uuid)
    with pytest.raises(ComputeHostNotFound, match="host99"):
        api.migrate(uuid, host="host99")
    assert api.list_migrations(instance_uuid=uuid) == before

    api.disable_service(other, reason="no moves")
    try:
        request_id = api.migrate(uuid)
        started = time.monotonic()
        with pytest.raises(OperationFailed, match="No valid host was found") as raised:
            api.wait(uuid, "VERIFY_RESIZE", timeout=120, request_id=request_id)
        assert time.monotonic() - started < 20
        assert f"ignored hosts ({source}) removed 1 host" in str(raised.value)
        [migration] = api.list_migrations(instance_uuid=uuid)
        assert migration["status"] == "error"
        [action] = [a for a in api.list_actions(uuid) if a["request_id"] == request_id]
        assert action["finish_time"] is not None and action["message"] == "Error"
    finally:
        api.enable_service(other)

    runner = CliRunner()
    result = runner.invoke(main, ["migrate", uuid, "--wait", "120"])
    assert result.exit_code == 0, result.output
    assert api.show(uuid)["status"] == "VERIFY_RESIZE"
    [*_, migrate] = api.list_actions(uuid)
    assert migrate["action"] == "migrate" and migrate["finish_time"] is not None
    result = runner.invoke(main, ["resize-confirm", uuid, "--wait", "120"])
    assert result.exit_code == 0, result.output
    view = api.show(uuid)
    assert (view["status"], view["host"]) == ("ACTIVE", other)
    [*_, confirm] = api.list_actions(uuid)
    assert confirm["action"] == "confirmResize" and confirm["finish_time"] is not None
    assert_no_leaks()
