"""The API's input boundary, declared with pydantic: every public call is wrapped in
``validate_call`` (strict: no coercion, so ``"2"`` or ``True`` is not an integer; unknown
keyword arguments, filters and mapping keys refused), and any refusal becomes one
``InvalidInput`` whose message names the field::

    vcpus must be an integer, got '2'
    property hw_vm_mode must be a string, got 1
    unknown scheduler hint 'near'

Beyond types, the annotations here hold Nova's limits that need nothing else: a ``Name``
is at most 255 printable characters (no NUL, ESC, newline or bidi override), an ``Int``
fits Nova's ``Integer`` columns, ``Seconds`` is a finite, non-negative wait. The checks
that need the database or Nova's other rules (a known flavor or host, an extra spec's
operator, an image property's allowed values) stay with the calls, still before anything
is written.
"""

from __future__ import annotations

import functools
import inspect
import unicodedata
from collections.abc import Callable, Mapping
from typing import Annotated, Any, TypeVar

from pydantic import ConfigDict, ValidationError, ValidatorFunctionWrapHandler, validate_call
from pydantic.functional_validators import AfterValidator, WrapValidator
from pydantic_core import ErrorDetails, PydanticCustomError

from novaq.exceptions import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])

_CONFIG = ConfigDict(strict=True, extra="forbid", arbitrary_types_allowed=True)

#: What a field must be, by pydantic's error type, when no ``expect`` phrase names it.
_PHRASES = {
    "int_type": "an integer",
    "float_type": "a number",
    "string_type": "a string",
    "bool_type": "a boolean",
    "dict_type": "a mapping",
    "list_type": "a list",
    "is_instance_of": "of the right type",
}
_EXPECTED = "expected"
_KEY = "[key]"
#: Error types of an argument or key the call does not take.
_UNKNOWN = ("extra_forbidden", "unexpected_keyword_argument", "unexpected_positional_argument")


def expect(phrase: str) -> WrapValidator:
    """Annotation metadata: a value refused here, whatever its inner error (a union's
    members, a constraint), is reported as not being ``phrase``."""

    def check(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        try:
            return handler(value)
        except ValidationError:
            raise PydanticCustomError(_EXPECTED, phrase) from None

    return WrapValidator(check)


#: Nova's limit for a name, a key or a value (the columns are ``String(255)``).
MAX_NAME = 255
#: Nova's limit for a count or a size held in an ``Integer`` column (``db.MAX_INT``).
MAX_INT = 2**31 - 1


def text_problem(value: str, limit: int = MAX_NAME, minimum: int = 1) -> str | None:
    """Why ``value`` cannot be a name, a key or a value (None if it can): longer than
    ``limit``, or holding a character that is not printable (Unicode category C: control
    characters such as NUL, ESC and newlines, format characters such as the bidi override
    U+202E), as Nova's ``valid_name_regex`` refuses them."""
    if len(value) > limit:  # (a blank name is refused by the call, which knows its field)
        return f"{minimum} to {limit} characters"
    for char in value:
        if unicodedata.category(char)[0] == "C":
            return f"printable characters only ({unicodedata.name(char, hex(ord(char)))!r} is not)"
    return None


def _printable(value: str) -> str:
    problem = text_problem(value)
    if problem is not None:
        raise PydanticCustomError(_EXPECTED, problem)
    return value


def _in_int_range(value: int) -> int:
    if not -MAX_INT - 1 <= value <= MAX_INT:
        raise PydanticCustomError(_EXPECTED, f"an integer from {-MAX_INT - 1} to {MAX_INT}")
    return value


def _seconds(value: float) -> float:
    if not 0 <= value <= MAX_SECONDS:  # NaN fails both comparisons
        raise PydanticCustomError(_EXPECTED, f"a number of seconds from 0 to {MAX_SECONDS}")
    return value


#: The longest a call may be asked to wait (a day): ``inf`` or 1e300 would never return.
MAX_SECONDS = 86400.0

#: A name, a key or a short value: a string of at most 255 printable characters (a blank
#: one is refused by the call, ``check_name``, which knows what it names).
Name = Annotated[str, expect("a non-empty string"), AfterValidator(_printable)]
#: A filter's value: any string of at most 255 printable characters (empty matches none).
Printable = Annotated[str, expect("a string"), AfterValidator(_printable)]
#: Any integer argument fits Nova's ``Integer`` columns: 10**30 is bad input, not an
#: ``OverflowError`` from the database driver.
Int = Annotated[int, expect("an integer"), AfterValidator(_in_int_range)]
#: A timeout or an interval: a finite number of seconds, not negative.
Seconds = Annotated[float, expect("a number"), AfterValidator(_seconds)]


def _field(loc: tuple[int | str, ...], labels: Mapping[str, str], items: Mapping[str, str]) -> str:
    """``loc`` as words: a parameter by its label, an item of a mapping parameter as
    ``<item> <key>`` (``property hw_vm_mode``) or ``<param>[<key>]``."""
    param = str(loc[0])
    label = labels.get(param, param)
    if len(loc) == 1:
        return label
    key = loc[1]
    item = items.get(param)
    if len(loc) > 2 and loc[2] == _KEY:
        return f"{item} name {key}" if item else f"a key of {label}"
    return f"{item} {key}" if item else f"{label}[{key!r}]"


def reason(
    error: ErrorDetails, labels: Mapping[str, str], items: Mapping[str, str], extra: str
) -> str:
    """One pydantic error as a sentence naming its field."""
    loc, kind = error["loc"], error["type"]
    if kind in _UNKNOWN[:2]:
        if len(loc) == 1:
            return f"unknown {extra} {loc[0]!r}"
        param = str(loc[0])
        return f"unknown {items.get(param, labels.get(param, param) + ' key')} {loc[1]!r}"
    if kind == "unexpected_positional_argument":
        return f"too many positional arguments (got {error['input']!r} too)"
    if kind == "missing_argument":
        return f"{_field(loc, labels, items)} is required"
    phrase = error["msg"] if kind == _EXPECTED else _PHRASES.get(kind)
    if phrase is None:
        return f"{_field(loc, labels, items)}: {error['msg']}, got {shown(error['input'])}"
    return f"{_field(loc, labels, items)} must be {phrase}, got {shown(error['input'])}"


def shown(value: Any, limit: int = 60) -> str:
    """``value``'s repr for a message, cut short: a 10 MB string is not echoed back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


def _first(errors: list[ErrorDetails]) -> ErrorDetails:
    """The error to report: an unknown argument before what it may have displaced."""
    return min(errors, key=lambda e: e["type"] not in _UNKNOWN)


def _named(error: ErrorDetails, names: list[str]) -> ErrorDetails:
    """``error`` located by parameter name, not by the index of a positional argument."""
    loc = error["loc"]
    if loc and isinstance(loc[0], int) and loc[0] < len(names):
        return {**error, "loc": (names[loc[0]], *loc[1:])}
    return error


class _Raised(Exception):
    """Carries a ``ValidationError`` the call itself raised past the argument check."""

    def __init__(self, error: ValidationError) -> None:
        super().__init__(error)
        self.error = error


def validated(
    labels: Mapping[str, str] | None = None,
    items: Mapping[str, str] | None = None,
    extra: str = "argument",
    error: type[InvalidInput] = InvalidInput,
) -> Callable[[F], F]:
    """Validate a public call's arguments against its annotations (``validate_call``);
    refuse bad ones with ``error`` (an ``InvalidInput``) naming the field. ``labels``:
    how a parameter is named in messages; ``items``: how an item of a mapping parameter
    is; ``extra``: what an unknown keyword is (e.g. "filter")."""

    def wrap(function: F) -> F:
        @functools.wraps(function)
        def body(*args: Any, **kwargs: Any) -> Any:
            try:
                return function(*args, **kwargs)
            except ValidationError as exc:  # the call's own, not its arguments'
                raise _Raised(exc) from exc

        checked = validate_call(config=_CONFIG)(body)
        # A positional argument's error is located by its index: name it instead.
        names = [
            p.name
            for p in inspect.signature(function).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
        ]

        @functools.wraps(function)
        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return checked(*args, **kwargs)
            except ValidationError as exc:
                first = _named(_first(exc.errors()), names)
                named = first["type"] != "unexpected_positional_argument" and first["loc"]
                raise error(
                    reason=reason(first, labels or {}, items or {}, extra),
                    field=str(first["loc"][0]) if named else None,
                ) from None
            except _Raised as raised:
                raise raised.error from None

        return call  # type: ignore[return-value]

    return wrap
