"""Conditions of ``If`` and ``Switch`` nodes: what is tested, checked when a workflow is
saved, evaluated against a node's input text.

A condition tests the input text, or — with ``path`` — the value a JMESPath expression
picks out of the input parsed as JSON. Regular expressions run on RE2, which matches in
time linear in the input whatever the pattern (no backreferences, no look-around): a
condition is evaluated on the server's event loop when it has no ``path``, and a pattern
that backtracks for ever would stop every request. Numbers compare as numbers; a number
operator on a value that is not a number fails the node (``not_a_number``), rather than
quietly taking the ``false`` branch.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Literal, get_args

import jmespath
import re2
from jmespath.exceptions import JMESPathError
from pydantic import BaseModel, ConfigDict, Field

from nodeloom.nodes import jsonvalue
from nodeloom.sdk._node import NodeFailure, ParamProblem

TextOperator = Literal[
    "equals",
    "not_equals",
    "contains",
    "not_contains",
    "starts_with",
    "ends_with",
    "matches",
]
NumberOperator = Literal["eq", "ne", "gt", "gte", "lt", "lte"]
EmptyOperator = Literal["is_empty", "is_not_empty"]
Operator = Literal[TextOperator, NumberOperator, EmptyOperator]
TEXT_OPERATORS: tuple[str, ...] = get_args(TextOperator)
NUMBER_OPERATORS: tuple[str, ...] = get_args(NumberOperator)
EMPTY_OPERATORS: tuple[str, ...] = get_args(EmptyOperator)
MAX_PATTERN = 2000
MAX_VALUE_DEPTH = 16
REGEX_MEMORY = 8 * 1024 * 1024  # bytes RE2 may use for one compiled pattern


class Condition(BaseModel):
    """One test of the input."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    operator: Operator = Field(
        default="is_not_empty",
        description="Text: equals, not_equals, contains, not_contains, starts_with, "
        "ends_with, matches (an RE2 regular expression). Numbers: eq, ne, gt, gte, lt, lte. "
        "Any value: is_empty, is_not_empty (empty: nothing, blank text, [], {} or null).",
    )
    # Any JSON value, typed by the operator in ``problems`` (a union here would point its
    # errors at the union's members, /value/str and /value/float, not at /value).
    value: Any = Field(
        default=None,
        description="What to compare with: text for the text operators (the pattern for "
        "matches), a number for the number operators; unused by is_empty/is_not_empty. "
        "With equals and a path, any JSON value.",
    )
    path: str | None = Field(
        default=None,
        max_length=2000,
        description="A JMESPath expression: the input is parsed as JSON and the value it "
        "picks is tested (e.g. `answer.category`). Empty: the input text itself.",
    )
    case_sensitive: bool = Field(default=True, description="For the text operators.")


def problems(condition: Condition, at: tuple[str | int, ...] = ()) -> list[ParamProblem]:
    """What is wrong with ``condition`` (cheap: a pattern and a path compile in
    microseconds), each at its param's path under ``at``."""
    found: list[ParamProblem] = []
    op, value = condition.operator, condition.value
    if jsonvalue.depth(value) > MAX_VALUE_DEPTH:
        return [ParamProblem((*at, "value"), f"value nests more than {MAX_VALUE_DEPTH} levels")]
    if not isinstance(value, str | int | float | type(None)) and not (
        op == "equals" and condition.path
    ):
        return [ParamProblem((*at, "value"), "value must be a string or a number")]
    if condition.path:
        try:
            jmespath.compile(condition.path)
        except JMESPathError as exc:
            found.append(ParamProblem((*at, "path"), f"bad JMESPath expression: {exc}"))
    if op in NUMBER_OPERATORS and not _is_number(value):
        found.append(ParamProblem((*at, "value"), f"{op} compares numbers: value must be one"))
    elif op in TEXT_OPERATORS and op != "equals" and not isinstance(value, str):
        found.append(ParamProblem((*at, "value"), f"{op} compares text: value must be a string"))
    elif op == "equals" and value is None and not condition.path:
        found.append(ParamProblem((*at, "value"), "equals needs a value to compare with"))
    if op == "matches" and isinstance(value, str):
        if len(value) > MAX_PATTERN:
            found.append(
                ParamProblem((*at, "value"), f"a pattern has at most {MAX_PATTERN} characters")
            )
        else:
            error = _pattern_error(value, condition.case_sensitive)
            if error:
                found.append(ParamProblem((*at, "value"), f"bad regular expression: {error}"))
    return found


def evaluate(condition: Condition, text: str) -> bool:
    """Does ``text`` (the node's input) pass ``condition``? NodeFailure when the input is
    not JSON (with a path) or a number operator meets something that is not a number."""
    subject: Any = text
    if condition.path:
        document = jsonvalue.parse(text)
        try:
            subject = jmespath.search(condition.path, document)
        except JMESPathError as exc:
            raise NodeFailure(f"JMESPath error: {exc}", "invalid_expression") from exc
    op, value = condition.operator, condition.value
    if op in EMPTY_OPERATORS:
        empty = (
            subject is None
            or subject in ("", [], {})
            or (isinstance(subject, str) and not subject.strip())
        )
        return empty if op == "is_empty" else not empty
    if op in NUMBER_OPERATORS:
        return _compare(op, _number(subject, condition.path), float(value or 0))
    if op == "equals" and condition.path and not isinstance(value, str):
        return bool(subject == value)
    left = subject if isinstance(subject, str) else jsonvalue.as_text(subject)
    right = str(value if value is not None else "")
    if op == "matches":
        return _pattern(right, condition.case_sensitive).search(left) is not None
    if not condition.case_sensitive:
        left, right = left.casefold(), right.casefold()
    if op in ("equals", "not_equals"):
        return (left == right) == (op == "equals")
    if op in ("contains", "not_contains"):
        return (right in left) == (op == "contains")
    if op == "starts_with":
        return left.startswith(right)
    return left.endswith(right)


def describe(condition: Condition) -> str:
    where = f"{condition.path} of the input" if condition.path else "the input"
    return f"{where} {condition.operator} {condition.value!r}"


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _number(subject: Any, path: str | None) -> float:
    if _is_number(subject):
        return float(subject)
    if isinstance(subject, str):
        try:
            number = float(subject.strip())
        except ValueError:
            pass
        else:
            if math.isfinite(number):
                return number
    where = f"{path!r} picks" if path else "the input is"
    shown = jsonvalue.as_text(subject)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise NodeFailure(f"{where} {shown!r}, not a number", "not_a_number")


def _compare(op: str, left: float, right: float) -> bool:
    return {
        "eq": left == right,
        "ne": left != right,
        "gt": left > right,
        "gte": left >= right,
        "lt": left < right,
        "lte": left <= right,
    }[op]


def _options(case_sensitive: bool) -> Any:
    options = re2.Options()
    options.log_errors = False
    options.case_sensitive = case_sensitive
    options.max_mem = REGEX_MEMORY
    return options


def _pattern_error(pattern: str, case_sensitive: bool) -> str | None:
    try:
        re2.compile(pattern, _options(case_sensitive))
    except re2.error as exc:
        detail = exc.args[0] if exc.args else exc
        return detail.decode("utf-8", "replace") if isinstance(detail, bytes) else str(detail)
    return None


@functools.lru_cache(maxsize=64)
def _pattern(pattern: str, case_sensitive: bool) -> Any:
    try:
        return re2.compile(pattern, _options(case_sensitive))
    except re2.error as exc:  # checked at save; a stored graph may predate the check
        raise NodeFailure(f"bad regular expression: {exc}", "invalid_expression") from exc
