"""What the console's pages show, made from the owner tools' answers: plain functions, no I/O.

Above: `pages` (which calls the owner door and renders these). Below: the standard library.

Nothing here escapes text: the templates do (Jinja2 with autoescape on), so a value is shown
as the characters it holds whatever they are. These functions only shape data: a readable
side-by-side diff of a tool's approved and live definitions, a config form's fields and the
values a submitted form means, the audit log's filters.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

__all__ = [
    "DiffRow",
    "FormField",
    "audit_filtered",
    "config_fields",
    "changed_values",
    "config_values",
    "connect_values",
    "field_errors",
    "pretty",
    "side_by_side",
    "when",
]

RowKind = Literal["same", "changed", "added", "removed"]


@dataclass(frozen=True)
class DiffRow:
    """One line of a side-by-side diff: the approved text (left), the live text (right)."""

    left: str
    right: str
    kind: RowKind


def when(value: Any) -> str:
    """An ISO 8601 time as a person reads it, in UTC to the second ("" for none)."""
    if not value:
        return ""
    try:
        moment = datetime.fromisoformat(str(value))
    except ValueError:
        return str(value)
    if moment.tzinfo is not None:
        moment = moment.astimezone(UTC)
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def pretty(value: Any) -> str:
    """A definition as indented JSON, keys sorted, so two versions line up line by line."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)


def side_by_side(approved: Any, live: Any) -> list[DiffRow]:
    """The approved definition beside the live one, aligned by `difflib`; a new tool (nothing
    approved yet) is all `added`."""
    old = pretty(approved).splitlines() if approved is not None else []
    new = pretty(live).splitlines()
    rows: list[DiffRow] = []
    matcher = difflib.SequenceMatcher(a=old, b=new, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            rows += [DiffRow(line, line, "same") for line in old[i1:i2]]
            continue
        rows += _replaced(old[i1:i2], new[j1:j2])
    return rows


def _key(line: str) -> str:
    """A JSON line's key (`"description":`), or the line: what pairs a changed line with its old self."""
    head, colon, _ = line.strip().partition('": ')
    return head if colon else line.strip()


def _replaced(left: list[str], right: list[str]) -> list[DiffRow]:
    """A block that differs: lines with the same key side by side as changed, the others alone."""
    rows: list[DiffRow] = []
    keys = difflib.SequenceMatcher(a=[_key(x) for x in left], b=[_key(x) for x in right], autojunk=False)
    for tag, i1, i2, j1, j2 in keys.get_opcodes():
        if tag == "equal":
            pairs = zip(left[i1:i2], right[j1:j2], strict=True)
            rows += [DiffRow(a, b, "same" if a == b else "changed") for a, b in pairs]
            continue
        rows += [DiffRow(a, "", "removed") for a in left[i1:i2]]
        rows += [DiffRow("", b, "added") for b in right[j1:j2]]
    return rows


@dataclass(frozen=True)
class FormField:
    """One declared config field as the config form shows it."""

    key: str
    label: str
    type: str
    bounds: str
    """`min … max` of an int field, as declared ("" when neither)."""
    default: Any
    description: str
    secret: bool
    required: bool
    value: Any
    shown: str
    """The input's text: the value as typed (a list one item a line); a secret never."""
    error: str | None = None


def _shown(kind: str, value: Any) -> str:
    if value is None:
        return ""
    if kind == "string_list" and isinstance(value, list):
        return "\n".join(str(v) for v in value)
    if kind == "bool":
        return "true" if value is True else "false"
    return str(value)


def _bounds(field: Mapping[str, Any]) -> str:
    low, high = field.get("min"), field.get("max")
    if low is None and high is None:
        return ""
    return f"{'' if low is None else low} … {'' if high is None else high}".strip()


def config_fields(
    declared: Sequence[Mapping[str, Any]],
    values: Mapping[str, Any],
    errors: Mapping[str, str] | None = None,
    typed: Mapping[str, str] | None = None,
) -> list[FormField]:
    """The form's fields: each declared field with its value at the scope (`config_get`), or
    what the owner typed when the host refused it (`typed`, a refused form's text)."""
    fields = []
    for field in declared:
        key, kind, secret = str(field["key"]), str(field["type"]), bool(field.get("secret"))
        value = values.get(key)
        shown = _shown(kind, value)
        if typed is not None and key in typed:
            shown = typed[key]
        fields.append(
            FormField(
                key=key,
                label=str(field.get("label") or ""),
                type=kind,
                bounds=_bounds(field),
                default=field.get("default"),
                description=str(field.get("description") or ""),
                secret=secret,
                required=bool(field.get("required")),
                value=value,
                shown="" if secret else shown,
                error=(errors or {}).get(key),
            )
        )
    return fields


def _value(kind: str, raw: str) -> Any:
    """A form's text as the value it means; text that does not parse is sent as it is, so the
    host's own check refuses it in its own words."""
    if kind == "int":
        try:
            return int(raw.strip())
        except ValueError:
            return raw
    if kind == "bool":
        return {"true": True, "false": False}.get(raw.strip().lower(), raw)
    if kind == "string_list":
        return [line.strip() for line in raw.splitlines() if line.strip()]
    return raw


def config_values(declared: Sequence[Mapping[str, Any]], form: Mapping[str, str]) -> dict[str, Any]:
    """The `values` of `config_set` a submitted form means: an emptied field resets its key to
    the default (null); a secret field left empty is left as it is (it is never shown)."""
    values: dict[str, Any] = {}
    for field in declared:
        key, kind = str(field["key"]), str(field["type"])
        if key not in form:
            continue
        raw = form[key]
        if raw.strip() == "":
            if not field.get("secret"):
                values[key] = None
            continue
        values[key] = _value(kind, raw)
    return values


def changed_values(values: Mapping[str, Any], current: Mapping[str, Any]) -> dict[str, Any]:
    """Of a submitted form's `values`, those that differ from the scope's values as read
    (`config_get`, defaults included): a field left as shown writes nothing, so saving a form
    never turns a default into a stored value."""
    return {key: value for key, value in values.items() if key not in current or current[key] != value}


def field_errors(message: str, keys: Iterable[str]) -> dict[str, str]:
    """A refusal of `config_set` placed by the field it names (`key: …` or `key.3: …`), else
    under the empty key (shown above the form)."""
    head = message.split(":", 1)[0].split(".", 1)[0]
    return {head: message} if head in set(keys) else {"": message}


def audit_filtered(entries: Sequence[Mapping[str, Any]], tool: str, outcome: str) -> list[Mapping[str, Any]]:
    """The audit rows whose tool and outcome contain the filters' text (empty: any)."""
    tool, outcome = tool.strip().lower(), outcome.strip().lower()
    return [
        e for e in entries if tool in str(e.get("tool", "")).lower() and outcome in str(e.get("outcome", "")).lower()
    ]


def connect_values(declared: Sequence[Mapping[str, Any]], form: Mapping[str, str]) -> dict[str, Any]:
    """The `settings` of `connector_connect` a submitted form means: empty fields are left out
    (a secret field is always empty when the page is shown: it is never echoed back)."""
    return {
        str(s["key"]): _value(str(s.get("type", "string")), form[str(s["key"])])
        for s in declared
        if form.get(str(s["key"]), "").strip() != ""
    }
