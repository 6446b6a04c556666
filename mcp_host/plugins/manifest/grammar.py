"""The manifest's grammar: the ids, names and texts a manifest may hold, as annotated string
types, and the few validation helpers every part of the model shares (an error at a precise
dotted location, all of a part's problems at once, a list without repeats).

Above: the rest of `manifest` (`model`, `transport`) and `install` (which names a plugin by
`PLUGIN_ID_RE`). Below: `text_safety` (which text is safe to show) and the plugin contract's op
names.
"""

from __future__ import annotations

import re
from typing import Annotated, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictInt,
    StrictStr,
    StringConstraints,
    ValidationError,
)
from pydantic_core import PydanticCustomError

from mcp_host_kit.contract import OP_NAMES

from ..text_safety import MAX_DESCRIPTION_BYTES, check_text, shown

__all__ = [
    "CATEGORY_RE",
    "HOST_OPS",
    "MAX_TITLE_CHARS",
    "PLUGIN_ID_RE",
    "SAFE_INT",
    "TOOL_NAME_RE",
    "Category",
    "Description",
    "DottedName",
    "HostOp",
    "Key",
    "Label",
    "Phrase",
    "PluginId",
    "Requirement",
    "SafeInt",
    "Strict",
    "Title",
    "ToolName",
    "Version",
    "collision_key",
    "problem",
    "refuse",
    "unique",
]

MAX_TITLE_CHARS = 200
# Integers a JSON peer (and jsonb) reads without loss.
SAFE_INT = 2**53 - 1

# Every grammar is anchored with \A…\Z so `.match`, `.search` and `.fullmatch` agree
# (a `$` would let a trailing newline through).
PLUGIN_ID_RE = re.compile(r"\A(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
CATEGORY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,31}\Z")
TOOL_NAME_RE = re.compile(r"\A[a-zA-Z0-9_-]{1,64}\Z")


def collision_key(name: str) -> str:
    """What two tool names that collide have in common: names that differ only in case, `-` or
    `_` collide (`Get_Item`, `get-item`), as exact ones do. Tool names are ASCII
    (`TOOL_NAME_RE`, checked before any tool is shown)."""
    return name.casefold().replace("-", "_")


_DOTTED_NAME_RE = re.compile(r"\A[a-z][a-z0-9_.]{0,63}\Z")
_KEY_RE = re.compile(r"\A[a-z][a-z0-9_]{0,63}\Z")
_HOST_OP_RE = re.compile(r"\A(?=.{1,64}\Z)[a-z][a-z0-9_]*(?:\.[a-z][a-z0-9_]*)*\Z")
_REQUIREMENT_RE = re.compile(r"\A[a-z][a-z0-9_]{0,31}:[a-z][a-z0-9_.]{0,63}\Z")

T = TypeVar("T")

# The host ops a manifest may name (docs/design.md "Plugin ABI"; the plugin contract's `OP_NAMES`);
# `backchannel.ops` implements exactly these. Naming any other op is a load error: a plugin
# must not start expecting an op it lacks.
HOST_OPS = OP_NAMES


# ---------------------------------------------------------------------------------------------
# Text and names


def _text(field: str, *, multiline: bool = False, max_bytes: int = MAX_DESCRIPTION_BYTES) -> AfterValidator:
    return AfterValidator(lambda value: check_text(value, field, multiline=multiline, max_bytes=max_bytes))


def _grammar(pattern: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not pattern.match(value):
            raise ValueError(f"{shown(value)} is not {what}")
        return value

    return AfterValidator(check)


PluginId = Annotated[
    StrictStr,
    _grammar(PLUGIN_ID_RE, "a plugin id (dot-joined words of a-z 0-9 _, at most 64)"),
]
Category = Annotated[StrictStr, _grammar(CATEGORY_RE, "a category name (a-z 0-9 _, at most 32)")]
ToolName = Annotated[StrictStr, _grammar(TOOL_NAME_RE, "a tool name (A-Z a-z 0-9 _ -, at most 64)")]
DottedName = Annotated[StrictStr, _grammar(_DOTTED_NAME_RE, "a name of a-z 0-9 _ . (at most 64)")]
Key = Annotated[StrictStr, _grammar(_KEY_RE, "a key (a-z 0-9 _, starting with a letter, at most 64)")]


def _known_op(value: str) -> str:
    if value not in HOST_OPS:
        raise ValueError(f"{shown(value)} is not a host op this host offers ({', '.join(sorted(HOST_OPS))})")
    return value


HostOp = Annotated[StrictStr, _grammar(_HOST_OP_RE, "a host op name (e.g. store.insert)"), AfterValidator(_known_op)]
Requirement = Annotated[StrictStr, _grammar(_REQUIREMENT_RE, 'a requirement of the form "category:action"')]
Title = Annotated[StrictStr, StringConstraints(max_length=MAX_TITLE_CHARS), _text("title")]
Label = Annotated[StrictStr, StringConstraints(max_length=MAX_TITLE_CHARS), _text("label")]
Version = Annotated[StrictStr, StringConstraints(max_length=64), _text("version")]
Description = Annotated[StrictStr, _text("description", multiline=True)]
Phrase = Annotated[StrictStr, StringConstraints(min_length=1, max_length=MAX_TITLE_CHARS), _text("phrase")]
SafeInt = Annotated[StrictInt, Field(ge=-SAFE_INT, le=SAFE_INT)]


# ---------------------------------------------------------------------------------------------
# Errors raised from validators that know a more precise location than pydantic's


def problem(at: str, message: str) -> PydanticCustomError:
    """An error `at` a dotted location below the one pydantic reports."""
    return PydanticCustomError("manifest", "{problem}", {"problem": message, "at": at})


def refuse(title: str, problems: list[tuple[str, str]]) -> None:
    """Raise every (dotted location, message) of `problems` at once, if there are any; pydantic
    merges them into the validation error, each below the location of the model that raised."""
    if problems:
        raise ValidationError.from_exception_data(
            title, [{"type": problem(at, message), "loc": (), "input": None} for at, message in problems]
        )


def unique(what: str, attr: str | None = None, *, fold: bool = False) -> AfterValidator:
    """Refuse a list whose items (or their `attr`) repeat; `fold` compares case-insensitively."""

    def check(items: tuple[T, ...]) -> tuple[T, ...]:
        seen: set[str] = set()
        for index, item in enumerate(items):
            name = str(getattr(item, attr) if attr else item)
            folded = name.casefold() if fold else name
            if folded in seen:
                at = f"{index}.{attr}" if attr else str(index)
                raise problem(at, f"duplicate {what} {shown(name)}")
            seen.add(folded)
        return items

    return AfterValidator(check)


class Strict(BaseModel):
    """A part of a manifest: unknown keys are refused, and it is frozen once read."""

    model_config = ConfigDict(extra="forbid", frozen=True)
