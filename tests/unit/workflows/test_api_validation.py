"""The API boundary (``workflows/api/validation.py``): every public call checks its
arguments with pydantic before anything is read, written or sent, and refuses a wrong type
or an unknown key with one ``InvalidInput`` that names the field."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import TypeAdapter, ValidationError
from sqlalchemy import func, select

from models import Aggregate, Flavor, Instance, ServerGroup
from models.db import session_scope
from novaq.exceptions import InvalidImage, InvalidInput
from workflows import api
from workflows.api.validation import validated

UUID = "6f1c3b2a-0d4e-4f5a-9b8c-7d6e5f4a3b2c"


def _counts(db_url: str) -> tuple[int, ...]:
    with session_scope(db_url) as session:
        return tuple(
            int(session.scalar(select(func.count()).select_from(m)) or 0)
            for m in (Flavor, Instance, Aggregate, ServerGroup)
        )


@pytest.mark.parametrize("name", api.__all__)
def test_every_public_call_refuses_an_unknown_keyword(name: str) -> None:
    # No database needed: the boundary refuses before the call runs.
    what = "filter" if name in ("list_instances", "list_migrations") else "argument"
    with pytest.raises(InvalidInput, match=f"unknown {what} 'bogus'") as raised:
        getattr(api, name)(bogus=1)
    assert raised.value.kwargs["field"] == "bogus"


@pytest.mark.parametrize(
    ("call", "args", "kwargs", "message", "field"),
    [
        (api.show, (12,), {}, "uuid must be a string, got 12", "uuid"),
        (api.reboot, (UUID,), {"hard": 1}, "hard must be a boolean, got 1", "hard"),
        (api.boot, ("vm", "m1", "cirros"), {"count": "2"}, "count must be an integer", "count"),
        (api.boot, ("vm", "m1", "cirros"), {"count": 2.0}, "count must be an integer", "count"),
        (api.boot, (7, "m1", "cirros"), {}, "server name must be a non-empty string", "name"),
        (
            api.boot,
            ("vm", "m1", "cirros"),
            {"hints": {"near": UUID}},
            "unknown scheduler hint 'near'",
            "hints",
        ),
        (api.list_instances, (), {"deleted": "yes"}, "deleted must be a boolean", "deleted"),
        (api.list_instances, (), {"colour": "red"}, "unknown filter 'colour'", "colour"),
        (api.list_migrations, (), {"host": 3}, "host must be a string", "host"),
        (
            api.set_aggregate_metadata,
            (1, {"k": True}),
            {},
            "metadata k must be a string, got True",
            "metadata",
        ),
        (api.add_host_to_aggregate, ("1", "host1"), {}, "aggregate id must be an integer", None),
        (
            api.create_server_group,
            ("g", "anti-affinity", {"max_server_per_host": True}),
            {},
            "server group rule max_server_per_host must be an integer",
            "rules",
        ),
        (api.audit, (), {"timeout": "soon"}, "timeout must be a number", "timeout"),
        (api.wait, (UUID, 3), {}, "status must be a string", "status"),
        (api.create_flavor, ("m1", 1, 512), {}, "root_gb is required", "root_gb"),
        (api.stop, (UUID, UUID), {}, "too many positional arguments", None),
    ],
)
def test_a_wrong_type_is_one_invalid_input_naming_the_field(
    db_url: str,
    call: Any,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    message: str,
    field: str | None,
) -> None:
    before = _counts(db_url)
    with pytest.raises(InvalidInput, match=message) as raised:
        call(*args, **kwargs)
    assert type(raised.value) is InvalidInput
    if field is not None:
        assert raised.value.kwargs["field"] == field
    assert _counts(db_url) == before


def test_the_image_calls_refuse_with_glances_invalid_image(db_url: str) -> None:
    with pytest.raises(InvalidImage, match="min_disk must be an integer >= 0, got 1.5"):
        api.create_image("img", path="/dev/null", disk_format="raw", min_disk=1.5)  # type: ignore[arg-type]
    with pytest.raises(InvalidImage, match="path must be the path of a local file or a URL"):
        api.create_image("img", path=3)  # type: ignore[arg-type]


def test_a_good_call_gets_its_arguments_as_given(db_url: str) -> None:
    flavor = api.create_flavor("m1", 1, 512, 1, extra_specs={"hw:cpu_cores": 2})
    assert flavor["extra_specs"] == {"hw:cpu_cores": "2"}  # numbers are taken as strings
    assert api.list_instances(host=None, deleted=True) == []


def test_a_validation_error_of_the_call_itself_is_not_taken_for_bad_input() -> None:
    @validated()
    def reads_bad_data(value: int) -> int:
        return TypeAdapter(int).validate_python("not stored right") + value

    with pytest.raises(ValidationError):
        reads_bad_data(1)
