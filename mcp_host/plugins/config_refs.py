"""The owner's config in a stdio child's command line and environment: `${config.KEY}` in a
manifest's `transport.args` and `transport.env` values, and `transport.env_from_config`.

Above: `manifest` (which refuses a reference it cannot honour, at load), `store.config` (which
reads the owner's values, secrets opened, and resolves them here when a child starts), the
child factory and `sandbox.launch` (which start the child with the result), and the installers
(which write references instead of freezing a bundle's or a registry entry's defaults).
Below: nothing but `re`.

`${config.KEY}` names a field of the manifest's owner `config`; its value is the owner's,
else the field's default, read each time a child starts, and a write to it restarts the
plugin's children (`store.config`). Resolved:

- an argument that is exactly one reference becomes the value (a `string_list` one argument
  per item); left out when the value is unset;
- inside a longer argument or an environment value, the value as text (unset: empty); a
  `string_list` may only stand alone as an argument;
- an environment value that is exactly one reference is left out when unset, as an
  `env_from_config` variable is.

A `secret` field never goes on a command line (every process can read another's), so it may
only be referenced from `env` or `env_from_config`. There is no escape: `${config.` always
opens a reference.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .manifest import ConfigField, Manifest, Transport

__all__ = [
    "REFERENCE",
    "ChildConfig",
    "args_need_config",
    "config_keys",
    "fixed_env",
    "needs_config",
    "reference_problems",
    "resolve",
    "value_text",
]

REFERENCE = re.compile(r"\$\{config\.([a-z][a-z0-9_]{0,63})\}")
"""`${config.KEY}`: KEY is a config key's grammar (`manifest.Key`)."""

_OPENED = re.compile(r"\$\{config\.")


@dataclass(frozen=True)
class ChildConfig:
    """What the owner's config gives one start of a child: the variables it adds (secrets among
    them: never put on a command line) and the arguments, references resolved."""

    env: Mapping[str, str] = field(default_factory=dict)
    args: tuple[str, ...] = ()


def value_text(value: object) -> str:
    """A config value as text: a bool as true/false, a list as JSON, else `str`."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list | tuple):
        return json.dumps(list(value), ensure_ascii=False)
    return str(value)


def config_keys(transport: Transport | None) -> frozenset[str]:
    """The owner config keys `transport` takes values from: referenced in its arguments or
    environment, or named by `env_from_config` (and `headers_from_config`, a remote's)."""
    if transport is None:
        return frozenset()
    texts = (*transport.args, *transport.env.values())
    found = {key for text in texts for key in REFERENCE.findall(text)}
    return frozenset(found | set(transport.env_from_config.values()) | set(transport.headers_from_config.values()))


def _whole(text: str) -> str | None:
    """The key when `text` is exactly one reference, else None."""
    match = REFERENCE.fullmatch(text)
    return match.group(1) if match is not None else None


def reference_problems(manifest: Manifest) -> Iterator[tuple[str, str]]:
    """(dotted field, problem) for each reference the host cannot honour: a malformed one, one
    naming no owner `config` key, a secret in an argument, a `string_list` inside a longer text
    or in the environment."""
    transport = manifest.transport
    if transport is None:
        return
    fields = {f.key: f for f in manifest.config}
    if transport.command is not None and _OPENED.search(transport.command):
        yield "transport.command", "the command is fixed: ${config.KEY} goes in args or env"
    for index, arg in enumerate(transport.args):
        yield from _text_problems(f"transport.args.{index}", arg, fields, argument=True)
    for name, text in transport.env.items():
        yield from _text_problems(f"transport.env.{name}", text, fields, argument=False)


def _text_problems(
    where: str, text: str, fields: Mapping[str, ConfigField], *, argument: bool
) -> Iterator[tuple[str, str]]:
    if len(_OPENED.findall(text)) != len(REFERENCE.findall(text)):
        yield where, "`${config.` opens a reference: ${config.KEY} with KEY a key of config"
    whole = _whole(text) is not None
    for key in REFERENCE.findall(text):
        declared = fields.get(key)
        if declared is None:
            yield where, f"${{config.{key}}}: {key!r} is not a key declared in config"
        elif declared.secret and argument:
            yield where, f"${{config.{key}}}: a secret never goes on a command line; pass it in env"
        elif declared.type == "string_list" and not (argument and whole):
            yield where, f"${{config.{key}}}: a string_list stands alone as an argument"


def resolve(transport: Transport | None, values: Mapping[str, object]) -> ChildConfig:
    """`transport`'s variables from the owner's config and its arguments, every reference
    resolved with `values` (config key -> value; None or absent: unset). The variables are
    `env_from_config`'s and the `env` entries holding a reference; `env`'s other entries are the
    manifest's own and not repeated here."""
    if transport is None:
        return ChildConfig()
    env: dict[str, str] = {}
    for name, key in transport.env_from_config.items():
        if values.get(key) is not None:
            env[name] = value_text(values[key])
    for name, text in transport.env.items():
        if REFERENCE.search(text) is None:
            continue
        alone = _whole(text)
        if alone is None:
            env[name] = _substituted(text, values)
        elif values.get(alone) is not None:
            env[name] = value_text(values[alone])
    args: list[str] = []
    for arg in transport.args:
        alone = _whole(arg)
        if alone is None:
            args.append(_substituted(arg, values))
            continue
        value = values.get(alone)
        if isinstance(value, list | tuple):
            args.extend(str(item) for item in value)
        elif value is not None:
            args.append(value_text(value))
    return ChildConfig(env, tuple(args))


def _substituted(text: str, values: Mapping[str, object]) -> str:
    def one(match: re.Match[str]) -> str:
        value = values.get(match.group(1))
        return "" if value is None else value_text(value)

    return REFERENCE.sub(one, text)


def needs_config(manifest: Manifest) -> bool:
    """Whether a start of `manifest`'s child reads the owner's config: a value it takes
    (`config_keys`), or a required field (unset, the child does not start)."""
    return bool(config_keys(manifest.transport)) or any(f.required for f in manifest.config)


def args_need_config(transport: Transport | None) -> bool:
    """Whether `transport`'s arguments name the owner's config (a launch needs them resolved)."""
    return transport is not None and any(REFERENCE.search(arg) for arg in transport.args)


def fixed_env(transport: Transport) -> dict[str, str]:
    """`transport.env`'s entries that reference no config: the manifest's own values."""
    return {name: text for name, text in transport.env.items() if REFERENCE.search(text) is None}
