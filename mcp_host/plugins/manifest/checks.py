"""What a whole manifest must hold together, beyond each field's own grammar: the cross-field
checks `Manifest` runs once it has read its fields, in the three tiers of problem — *problems*
stop the load, *mistakes* load (read fail-closed) and are errors to `mcp-host check`,
*warnings* load and are only shown.

Above: `model.Manifest` (its `_cross_checks` and `quota_gate`). Below: `config_refs` (which
`${config.KEY}` references the host can honour) and `text_safety`.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import TYPE_CHECKING

from mcp_host_kit.contract import loc_part

from ..config_refs import reference_problems
from ..text_safety import shown

if TYPE_CHECKING:
    from .model import ConfigField, Manifest

__all__ = ["mistakes", "problems", "quota_limit_declared", "warnings"]


def problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """(dotted field, problem) of what stops the load: connector fields on a capability (or
    missing on a connector), a quota key of the wrong type, config a child cannot be given."""
    return itertools.chain(
        _connector_problems(manifest),
        _quota_problems(manifest),
        _config_env_problems(manifest),
        _sign_in_problems(manifest),
    )


def _sign_in_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """A per-visitor sign-in needs a child per visitor session: a shared one would carry one
    visitor's token to another's calls."""
    transport = manifest.transport
    if transport is not None and transport.sign_in == "per_visitor" and not manifest.per_session:
        yield "transport.sign_in", "per_visitor needs instances: per_session"


def warnings(manifest: Manifest) -> Iterator[str]:
    """Declarations that load but look wrong: they point at nothing, or a quota is incomplete."""
    return itertools.chain(_mismatches(manifest), _quota_gaps(manifest))


def quota_limit_declared(manifest: Manifest) -> bool:
    """The quota's key is declared where a limit is read (`code_config`, `key_config`)."""
    return bool(_quota_declared(manifest, _QUOTA_SCOPES))


def _config_env_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """Secret and required fields are the owner's (`config`); `env_from_config` names them."""
    for scope, fields in manifest.config_lists().items():
        if scope == "config":
            continue
        for index, field in enumerate(fields):
            for flag in ("secret", "required"):
                if getattr(field, flag):
                    yield f"{scope}.{index}.{flag}", f"only the owner's config (config) has {flag} fields"
    owner_keys = {field.key for field in manifest.config}
    env = manifest.transport.env_from_config if manifest.transport is not None else {}
    for name, key in env.items():
        if key not in owner_keys:
            yield f"transport.env_from_config.{name}", f"{shown(key)} is not a key declared in config"
    headers = manifest.transport.headers_from_config if manifest.transport is not None else {}
    for name, key in headers.items():
        if key not in owner_keys:
            yield f"transport.headers_from_config.{name}", f"{shown(key)} is not a key declared in config"
    yield from reference_problems(manifest)  # ${config.KEY} in args and env


_CONNECTOR_FIELDS = ("category", "verbs", "settings")


def _connector_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    for name in _CONNECTOR_FIELDS:
        present = getattr(manifest, name) is not None
        if manifest.kind == "connector" and not present:
            yield name, "required when kind is connector"
        if manifest.kind != "connector" and present:
            yield name, "only a connector declares this"


# Where a quota's limit is read: the access code's config for a code session, the API key's for
# an API-key session (`quota.py`); a key declared only for the owner or a role limits nothing.
_QUOTA_SCOPES = ("code_config", "key_config")


def _quota_declared(manifest: Manifest, scopes: tuple[str, ...] | None = None) -> list[tuple[str, ConfigField]]:
    key = manifest.quota.config_key if manifest.quota else None
    return [
        (scope, f)
        for scope, fields in manifest.config_lists().items()
        if scopes is None or scope in scopes
        for f in fields
        if f.key == key
    ]


def _quota_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    if manifest.quota is None or manifest.quota.config_key is None:
        return
    key = manifest.quota.config_key
    for scope, field in _quota_declared(manifest):
        if field.type != "int":
            yield "quota.config_key", f"{shown(key)} is a {field.type} field in {scope}; a quota needs int"


def _quota_gaps(manifest: Manifest) -> Iterator[str]:
    """A quota that cannot be enforced: it loads, gates nothing, and says why."""
    quota = manifest.quota
    if quota is None:
        return
    if quota.missing():
        yield f"quota: incomplete (missing {', '.join(quota.missing())}); no quota is enforced"


def mistakes(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """(dotted field, problem) of declarations that load but do not do what their author meant:
    the tool they name is not a visitor tool, or the quota's limit can never be set."""
    listed = set(manifest.visitor_tools)
    quota = manifest.quota
    if quota is not None:
        for index, tool in enumerate(quota.tools):
            if tool not in listed:
                yield f"quota.tools.{index}", f"{shown(tool)} is not in visitor_tools; it uses up no quota"
        if quota.config_key is not None and not _quota_declared(manifest, _QUOTA_SCOPES):
            yield (
                "quota.config_key",
                f"{shown(quota.config_key)} is not declared in code_config or key_config, where a quota's"
                " limit is set; no quota is enforced",
            )
    for tool in manifest.visitor_tool_requires:
        if tool not in listed:
            yield f"visitor_tool_requires.{loc_part(tool)}", f"{shown(tool)} is not in visitor_tools"


def _mismatches(manifest: Manifest) -> Iterator[str]:
    """Declarations that point at nothing; loadable (children report the real tools) but suspect."""
    listed = set(manifest.visitor_tools)
    for tool, requirements in manifest.visitor_tool_requires.items():
        for requirement in requirements:
            category = requirement.partition(":")[0]
            if category not in manifest.requires:
                yield f"visitor_tool_requires: {shown(tool)} needs {shown(category)}, not in requires"
    gate = manifest.claim_gate
    if gate is not None and listed and gate.tool not in listed:
        yield f"claim_gate: {shown(gate.tool)} is not in visitor_tools"
    transport = manifest.transport
    if manifest.limits is not None and (transport is None or transport.kind != "stdio"):
        yield "limits: only a stdio child has them; this plugin starts none"
