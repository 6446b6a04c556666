"""What the console's pages show, made from the owner tools' answers: plain functions, no I/O.

Above: `pages` (which calls the owner door and renders these). Below: the standard library.

Nothing here escapes text: the templates do (Jinja2 with autoescape on), so a value is shown
as the characters it holds whatever they are. These functions only shape data: a readable
side-by-side diff of a tool's approved and live definitions (the stylesheet shows the same rows
as one unified diff on a phone), a capability's cause in words, a session's subject and visitor
as text, a config form's fields and the values a submitted form means (the config page's and a
role's), the audit log's filters.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal
from urllib.parse import quote

__all__ = [
    "READS",
    "app_preview",
    "ROLE_CONFIG_FIELD",
    "Cause",
    "DiffRow",
    "FormField",
    "RoleSection",
    "audit_filtered",
    "catalogue_cause",
    "config_fields",
    "changed_values",
    "config_values",
    "connect_values",
    "field_errors",
    "pretty",
    "role_config",
    "role_sections",
    "side_by_side",
    "subject_text",
    "visitor_text",
    "when",
]

RowKind = Literal["same", "changed", "added", "removed"]


@dataclass(frozen=True)
class DiffRow:
    """One line of a side-by-side diff: the approved text (left), the live text (right)."""

    left: str
    right: str
    kind: RowKind


def app_preview(pending: Mapping[str, Any]) -> str | None:
    """Where the console serves the live version of a pending tool's app for its sandboxed
    preview (`owner_console.guard.PREVIEW_PATH`), or None when it names none or none was read."""
    review = pending.get("app_review") or {}
    sha256 = review.get("live_sha256")
    if not isinstance(sha256, str):
        return None
    return f"/owner/tools/app/{quote(str(pending.get('capability', '')), safe='')}/{sha256}"


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


READS = frozenset(
    {
        "capabilities_list",
        "tools_pending",
        "app_contents",
        "holds_list",
        "sessions_list",
        "roles_list",
        "codes_list",
        "api_keys_list",
        "connectors_list",
        "config_get",
        "audit_list",
        "rules_get",
        "grants_list",
        "oauth_grants_list",
    }
)
"""The owner tools the console reads its pages with. The door audits every call, so each page
view leaves one to four of these rows (the live holds page one every 2 s): the audit page hides
them unless asked, so the owner's own changes are what it shows."""


def audit_filtered(
    entries: Sequence[Mapping[str, Any]], tool: str, outcome: str, *, reads: bool = False
) -> list[Mapping[str, Any]]:
    """The audit rows whose tool and outcome contain the filters' text (empty: any), without
    the rows of `READS` unless `reads`."""
    tool, outcome = tool.strip().lower(), outcome.strip().lower()
    return [
        e
        for e in entries
        if (reads or str(e.get("tool", "")) not in READS)
        and tool in str(e.get("tool", "")).lower()
        and outcome in str(e.get("outcome", "")).lower()
    ]


def connect_values(declared: Sequence[Mapping[str, Any]], form: Mapping[str, str]) -> dict[str, Any]:
    """The `settings` of `connector_connect` a submitted form means: empty fields are left out
    (a secret field is always empty when the page is shown: it is never echoed back)."""
    return {
        str(s["key"]): _value(str(s.get("type", "string")), form[str(s["key"])])
        for s in declared
        if form.get(str(s["key"]), "").strip() != ""
    }


@dataclass(frozen=True)
class Cause:
    """Why a capability has the status it has, in words; `href`: the page where the owner mends it."""

    text: str
    href: str | None = None


def _joined(words: Sequence[str]) -> str:
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def catalogue_cause(capability: Mapping[str, Any]) -> Cause | None:
    """A catalogue entry's cause: the host's own (a failure, a withheld tool), else a required
    connector category nobody connected, else — not started — that it starts when first used."""
    if capability.get("cause"):
        return Cause(str(capability["cause"]))
    missing = [str(r.get("category")) for r in capability.get("requires") or () if not r.get("connected")]
    if missing:
        them = "one" if len(missing) == 1 else "them"
        return Cause(f"needs a {_joined(missing)} connector — connect {them} on Connectors", "/owner/connectors")
    if capability.get("status") == "not_started":
        return Cause("not started yet: it starts when first used")
    return None


_SUBJECT_KINDS = {"code": "access code", "api_key": "API key"}


def subject_text(subject: Mapping[str, Any] | None) -> str:
    """The credential a session was opened with, as words: `access code c_…`, `API key k_…`."""
    if not subject:
        return ""
    kind = str(subject.get("kind", ""))
    return f"{_SUBJECT_KINDS.get(kind, kind)} {subject.get('id', '')}".strip()


def visitor_text(visitor: Mapping[str, Any] | None) -> str:
    """What a visitor said about themselves, as a mail client shows it: `Ada <ada@example.org>`."""
    if not visitor:
        return ""
    name, email = visitor.get("name"), visitor.get("email")
    if name and email:
        return f"{name} <{email}>"
    return str(name or email or "")


ROLE_CONFIG_FIELD = "role_config:{capability}:{key}"
"""A role form's config input (`:` is in neither a capability id nor a config key)."""


@dataclass(frozen=True)
class RoleSection:
    """One capability in a role's form: granted or not, and its role config fields."""

    capability: str
    title: str
    granted: bool
    fields: list[FormField]


def _typed(form: Mapping[str, str], capability: str) -> dict[str, str]:
    prefix = ROLE_CONFIG_FIELD.format(capability=capability, key="")
    return {name.removeprefix(prefix): value for name, value in form.items() if name.startswith(prefix)}


def role_sections(
    capabilities: Sequence[Mapping[str, Any]],
    role: Mapping[str, Any] | None,
    typed: tuple[Mapping[str, str], Sequence[str]] | None = None,
) -> list[RoleSection]:
    """The role form's capabilities (from `capabilities_list`) with their role config fields:
    `role`'s grants and values (`roles_list`), or a refused form's (`typed`: its fields and its
    checked capabilities)."""
    granted = set(typed[1] if typed is not None else (role or {}).get("capabilities", ()))
    values = (role or {}).get("config", {})
    sections = []
    for c in capabilities:
        cid = str(c["id"])
        declared = c.get("config", {}).get("role", [])
        fields = config_fields(declared, values.get(cid, {}), typed=_typed(typed[0], cid) if typed else None)
        sections.append(RoleSection(cid, str(c.get("title") or cid), cid in granted, fields))
    return sections


def role_config(
    capabilities: Sequence[Mapping[str, Any]], granted: Sequence[str], form: Mapping[str, str]
) -> dict[str, dict[str, Any]]:
    """The `config` of `role_put` a submitted role form means: each granted capability whose
    role config fields the form holds, with the values that differ from their defaults (role_put
    replaces a granted capability's role config, and a key left out reads as its default).
    Empty when the form holds none: then the stored role config is left as it is."""
    config: dict[str, dict[str, Any]] = {}
    for c in capabilities:
        cid, declared = str(c["id"]), c.get("config", {}).get("role", [])
        typed = _typed(form, cid)
        if cid not in granted or not declared or not typed:
            continue
        values = config_values(declared, typed)
        defaults = {str(f["key"]): f.get("default") for f in declared}
        config[cid] = {k: v for k, v in values.items() if v is not None and v != defaults.get(k)}
    return config
