"""Owner-context calls: running a capability's declared owner tool for the owner.

Above: the owner door's `capability_invoke`. Below: `manifest` (the `owner_tools` table),
`jsonschema` (arguments are checked against the declared `input_schema`, under its own
dialect, before any child starts), `children` (the forwarded call), `meta` and `grants` (the
call scope is the owner's: `mode: "owner"`, no visitor, no session).

Only a tool declared in the manifest's `owner_tools` can be run this way, looked up by the
name the owner sees; a tool the child has but did not declare is `unknown`. The child's
result comes back as it gave it (its own `{code, message}` refusals included), without the
child's serverInfo stamp. The owner's rules (`policy.rules`) decide each call first: an
owner-context call too may be refused or held (for the owner's own approval, `hold_decide`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import mcp.types as types
from jsonschema.exceptions import SchemaError

from mcp_host.backchannel import CallScope, GrantBook, named_ops
from mcp_host.children import Child
from mcp_host.errors import InvalidArguments, UnknownTool
from mcp_host.plugins import OwnerTool, Plugin, Registry, schema_validator
from mcp_host.policy import RuleGate, owner_call
from mcp_host.wire import forwarded_meta, without_host_keys

__all__ = ["OwnerCalls", "check_arguments"]

_MAX_PROBLEMS = 5


def check_arguments(schema: Mapping[str, Any], arguments: Mapping[str, Any]) -> None:
    """Raise `InvalidArguments` naming each place where `arguments` fails `schema` (at most 5),
    validated under the schema's own dialect (`$schema`; 2020-12 when absent)."""
    try:
        validator = schema_validator(dict(schema))
        errors = sorted(validator.iter_errors(dict(arguments)), key=lambda e: list(map(str, e.absolute_path)))
    except (SchemaError, ValueError):  # the manifest loader checked it; fail closed if it still does not hold
        raise InvalidArguments("the tool's declared input schema cannot be used") from None
    if errors:
        problems = [
            f"arguments{''.join(f'.{p}' for p in error.absolute_path)}: {error.message[:200]}"
            for error in errors[:_MAX_PROBLEMS]
        ]
        raise InvalidArguments("; ".join(problems))


class OwnerCalls:
    """Runs declared owner tools in owner context."""

    def __init__(
        self,
        plugins: Registry,
        child_of: Callable[[Plugin], Child],
        *,
        grants: GrantBook,
        call_timeout_s: float,
        rules: RuleGate | None = None,
    ) -> None:
        """`rules`: the owner's rules, which decide each owner-context call (None: all go on)."""
        self._plugins = plugins
        self._child_of = child_of
        self._grants = grants
        self._call_timeout_s = call_timeout_s
        self._rules = rules

    def owner_tool(self, capability: str, name: str) -> tuple[Plugin, OwnerTool]:
        """The capability and its declared owner tool `name`; raises `UnknownTool`."""
        plugin = self._plugins.get(capability, "capability")
        if plugin is None:
            raise UnknownTool(f"no capability named {capability[:80]!r} is loaded")
        for tool in plugin.manifest.owner_tools or ():
            if tool.name == name:
                return plugin, tool
        raise UnknownTool(f"{capability} declares no owner tool named {name[:80]!r}")

    async def invoke(
        self, owner_id: str, capability: str, name: str, arguments: Mapping[str, Any] | None
    ) -> types.CallToolResult:
        """Run `capability`'s owner tool `name` for `owner_id` and return the child's result.

        Raises `UnknownTool` (not declared), `InvalidArguments` (the arguments fail the
        declared schema; no child is started), `Denied`/`Held` (the owner's rules), and the
        forwarding errors of `Child.call_tool`.
        """
        plugin, tool = self.owner_tool(capability, name)
        args = dict(arguments or {})
        check_arguments(tool.input_schema, args)
        if self._rules is not None:  # refused or held here: no child starts
            await self._rules.admit(owner_call(owner_id, plugin.manifest.id, name, args))
        child = self._child_of(plugin)
        scope = CallScope(owner_id)
        if not named_ops(plugin):
            result = await child.call_tool(
                tool.tool, args, forwarded_meta({}, scope.wire()), timeout_s=self._call_timeout_s
            )
        else:
            with self._grants.issue(plugin.manifest.id, scope, tool.tool) as (token, _grant):
                meta = forwarded_meta({}, scope.wire(), token)
                result = await child.call_tool(tool.tool, args, meta, timeout_s=self._call_timeout_s)
        return without_host_keys(result)  # a plugin does not speak for the host to the owner either
