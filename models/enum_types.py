"""Column types that store an enum as the plain string or integer the table already holds.

``sqlalchemy.Enum`` would add a CHECK or a native type (a schema change on existing
databases); these decorate ``String``/``Integer`` instead, so Alembic sees the same column
and old rows read back unchanged. Reading returns the enum member. Binding passes any value
through as its string (or integer): a filter on a value outside the enum (an API's
``status=bogus``) finds nothing, as before, instead of failing; the models' validators
refuse such values on write.
"""

from __future__ import annotations

from enum import Enum, IntEnum, StrEnum
from typing import Any, TypeVar

from sqlalchemy import Integer, String
from sqlalchemy.types import TypeDecorator

SE = TypeVar("SE", bound=StrEnum)
IE = TypeVar("IE", bound=IntEnum)


class StrEnumType(TypeDecorator[SE]):
    """A ``StrEnum`` in a ``VARCHAR(length)``."""

    impl = String
    cache_ok = True

    def __init__(self, enum: type[SE], length: int) -> None:
        super().__init__(length)
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Any) -> str | None:
        return None if value is None else str(value.value if isinstance(value, Enum) else value)

    def process_result_value(self, value: Any, dialect: Any) -> SE | None:
        return None if value is None else self.enum(value)

    def process_literal_param(self, value: Any, dialect: Any) -> str:
        return repr(str(value.value if isinstance(value, Enum) else value))

    @property
    def python_type(self) -> type[SE]:
        return self.enum


class IntEnumType(TypeDecorator[IE]):
    """An ``IntEnum`` in an ``INTEGER``."""

    impl = Integer
    cache_ok = True

    def __init__(self, enum: type[IE]) -> None:
        super().__init__()
        self.enum = enum

    def process_bind_param(self, value: Any, dialect: Any) -> int | None:
        return None if value is None else int(value)

    def process_result_value(self, value: Any, dialect: Any) -> IE | None:
        return None if value is None else self.enum(value)

    def process_literal_param(self, value: Any, dialect: Any) -> str:
        return str(int(value))

    @property
    def python_type(self) -> type[IE]:
        return self.enum
