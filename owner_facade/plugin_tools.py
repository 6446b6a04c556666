"""The plugins slice of the owner tool table: adding, listing, removing and upgrading plugins
while the host runs (`plugin_add`, `plugins_list`, `plugin_remove`, `plugin_upgrade`).

Above: `tools` (the one table). Below: `mcp_host.plugins.PluginAdmin`, the plugin-admin service
the command line uses too (the install, the load check, the trial start, the switch, and the
rollback of each), run here with `progress.with_progress` (npm's or pip's lines as MCP
progress); and `services.PluginParts`, the running host's side this module adds: its registry,
its children, the owner's review of a new plugin's tools, and the sessions told that a plugin
came or went.
"""

from __future__ import annotations

from typing import Any

import anyio

from mcp_host.backchannel import named_ops
from mcp_host.errors import HostError, InvalidArguments, Unconfigured
from mcp_host.plugins import Plugin, PluginAdmin, reach
from mcp_host.sandbox import Launch, launch_for
from mcp_host.store import ConfigUnset, OwnerEnv, declared, uninstall

from .models import NoArguments, PluginAdd, PluginRemove, PluginUpgrade
from .next_steps import next_steps
from .owner_tool import Answer, OwnerTool
from .progress import with_progress
from .services import OwnerServices, PluginParts

__all__ = ["PLUGIN_TOOLS"]

# How long a new plugin (or version) has to list its tools (its child starting).
_FIRST_LIST_WAIT_S = 60.0


def _parts(s: OwnerServices) -> PluginParts:
    if s.admin is None:
        raise Unconfigured("this host does not install plugins from the owner door")
    return s.admin


def _service(parts: PluginParts) -> PluginAdmin:
    return PluginAdmin(parts.data_dir, parts.installer, with_progress)


def _runnable(plugin: Plugin) -> None:
    """Refuse what a running host cannot take: a connector, a plugin that names host ops or a
    quota (a plugin added while the host runs never gets a back-channel)."""
    pid = plugin.manifest.id
    if plugin.manifest.kind != "capability":
        raise InvalidArguments(f"{pid} is a connector; a running host adds capabilities only (restart it)")
    if named_ops(plugin) or plugin.manifest.quota_gate() is not None:
        raise InvalidArguments(f"{pid} names host ops or a quota, which a plugin added while the host runs cannot use")


async def _grant(s: OwnerServices, owner_id: str, role_id: str, pid: str) -> None:
    """Add `pid` to the capabilities of role `role_id`, its config kept (`plugin_add`'s `role`).
    A read, then a write: an owner's `role_put` of that role at the same moment may be lost."""
    role = await s.access.roles.get(owner_id, role_id)
    if role is None:
        raise InvalidArguments(f"role: no role {role_id[:64]!r}; nothing was installed")
    if pid in role.capabilities:
        return
    try:
        await s.access.put_role(owner_id, role_id, [*role.capabilities, pid])
    except InvalidArguments as exc:
        raise InvalidArguments(f"role: {role_id} cannot grant {pid} ({exc.message}); nothing was installed") from None


async def _listed_for_review(s: OwnerServices, plugin: Plugin) -> list[str]:
    """List `plugin`'s tools in owner context (bounded) and announce it; its pending tools."""
    parts = _parts(s)
    if s.review is not None:
        with anyio.move_on_after(_FIRST_LIST_WAIT_S):
            await s.review.all([plugin])  # the pins see its definitions: new or changed ones are pending
    parts.announce(plugin.manifest.id)  # the sessions that see it relist (its tools show once approved)
    pid = plugin.manifest.id
    return [t.tool for t in await s.pins.pending() if t.plugin_id == pid] if s.pins is not None else []


async def _plugin_add(s: OwnerServices, owner_id: str, a: PluginAdd) -> Answer:
    """Install, load and add a plugin; grant it to `role` (one that exists: checked before
    anything is installed); list its tools for the owner's review at once. A failure after the
    install removes the folder again: nothing is left behind. Answers with what it can reach and
    what is left before a visitor can call it (`next_steps`)."""
    parts = _parts(s)
    if a.id is not None and s.plugins.get(a.id) is not None:
        raise InvalidArguments(f"a plugin {a.id[:64]} is loaded already; choose another id")
    if a.role is not None and not await s.access.roles.exists(owner_id, a.role):
        raise InvalidArguments(f"role: no role {a.role[:64]!r} (roles_list shows yours; role_put makes one)")

    async def accept(plugin: Plugin) -> None:
        pid = plugin.manifest.id
        if s.plugins.get(pid) is not None:
            raise InvalidArguments(f"a plugin {pid} is loaded already; choose another id")
        _runnable(plugin)
        s.plugins.add(plugin)
        if a.role is not None:
            try:
                await _grant(s, owner_id, a.role, pid)
            except BaseException:
                s.plugins.remove(pid)
                raise

    added = await _service(parts).add(a.source, a.id, accept=accept)
    plugin, done = added.plugin, added.installed
    pending = await _listed_for_review(s, plugin)
    return {
        "capability": plugin.manifest.id,
        "version": done.version,
        "folder": str(done.folder),
        "role": a.role,
        "pending_tools": pending,
        "config_to_set": [
            {"key": f.key, "type": f.type, "default": f.default, "description": f.description}
            | {"required": f.required, "secret": f.secret}
            for f in declared(plugin.manifest, "owner")
        ],
        "reaches": reach(plugin.manifest, plugin.folder),
        **await next_steps(s, owner_id, plugin, pending),
    }


async def _plugins_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    """The plugins installed in the data directory: id, source, version, folder, and loaded."""
    listed = await _service(_parts(s)).listed()
    return {
        "plugins": [
            {
                "id": p.id,
                "source": p.source,
                "version": p.manifest.version if p.manifest is not None else None,
                "folder": str(p.folder),
                "loaded": s.plugins.get(p.id) is not None,
            }
            for p in listed
        ]
    }


async def _plugin_remove(s: OwnerServices, owner_id: str, a: PluginRemove) -> Answer:
    """Stop an installed plugin's children, drop it from the registry and delete its folder;
    with `purge` also its store and config."""
    parts = _parts(s)
    was: list[Plugin | None] = []

    def stopping(plugin_id: str) -> None:
        parts.announce(plugin_id)  # first: the sessions that see it now (they relist once it is gone)
        was.append(s.plugins.remove(plugin_id))
        parts.children.stop_plugin(plugin_id)
        s.catalogue.forget(plugin_id)  # a re-install is vetted and recorded with the pins afresh

    folder = await _service(parts).remove(a.id, stopping=stopping)
    plugin = was[0]
    answer: dict[str, Any] = {"removed": a.id, "folder": str(folder), "was_loaded": plugin is not None}
    if plugin is not None and s.sign_ins is not None and await s.sign_ins.forget(plugin):
        answer["signed_out"] = True  # its tokens revoked at the server and deleted
    if a.purge:
        gone = await uninstall(parts.database, plugin.manifest.kind if plugin else "capability", a.id)
        pins = await s.pins.forget(a.id) if s.pins is not None else 0
        answer["purged"] = {
            "store_dropped": gone.schema_dropped,
            "config_rows_deleted": gone.config_rows_deleted,
            "tool_pins_deleted": pins,
        }
    return answer


async def _tried(s: OwnerServices, owner_id: str, parts: PluginParts, plugin: Plugin) -> list[str]:
    """Start the staged new version in owner context beside the old one (its own pool key, no
    host socket) and list its tools; stopped again either way. It starts with the variables the
    owner's config gives the plugin (`OwnerEnv`, the env source real starts read), so a version
    that needs a setting the owner has set starts as it will once switched in. A failure raises
    one sentence; a required setting left unset names it."""
    assert parts.settings is not None
    settings, key = parts.settings, f"{plugin.manifest.id}#upgrade"
    env = OwnerEnv(s.config, owner_id)

    async def launch() -> Launch:
        given = await env.child_config(plugin)  # ${config.KEY} in its arguments resolved too
        return launch_for(plugin, settings, extra_env=given.env, args=given.args)

    try:
        await env.env_for(plugin)  # a required setting left unset: said, before anything spawns
    except ConfigUnset as exc:
        raise InvalidArguments(f"the new version cannot start: {exc.message}; the old one keeps running") from None
    try:
        child = parts.children.child(key, launch, per_session=plugin.manifest.per_session)
        tools = await child.list_tools(timeout_s=_FIRST_LIST_WAIT_S)
    except HostError as exc:
        why = f"the new version did not list its tools ({exc.code}); the old one keeps running"
        raise InvalidArguments(why) from None
    finally:
        parts.children.stop_plugin(key)
    return [t.name for t in tools]


async def _plugin_upgrade(s: OwnerServices, owner_id: str, a: PluginUpgrade) -> Answer:
    """Install the new version beside the old one, list its tools, and only then switch: stop the
    old children, swap the folders, replace it in the registry and list it for the owner's
    review (changed definitions are pending again). Any failure before the switch deletes the
    new folder; the old version keeps running untouched."""
    parts = _parts(s)
    if parts.settings is None:
        raise Unconfigured("this host does not upgrade plugins from the owner door")
    old = s.plugins.get(a.id)

    async def trial(plugin: Plugin) -> list[str]:
        return await _tried(s, owner_id, parts, plugin)

    def switching(plugin_id: str) -> None:
        s.plugins.remove(plugin_id)
        parts.children.stop_plugin(plugin_id)

    upgraded = await _service(parts).upgrade(
        a.id, a.version, a.source, trial=trial, check=_runnable, switching=switching
    )
    s.plugins.add(upgraded.plugin)
    return {
        "capability": a.id,
        "from_version": old.manifest.version if old is not None else None,
        "version": upgraded.version,
        "folder": str(upgraded.folder),
        "tools": upgraded.tools,
        "pending_tools": await _listed_for_review(s, upgraded.plugin),
    }


PLUGIN_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "plugin_add",
        "Install an MCP server as a plugin and add it to the running host: npm:<package>[@<version>], "
        "pypi:<package>[==<version>], a path to an .mcpb bundle or a registry entry (server.json, any .json), "
        "or the https:// URL of a remote MCP server (nothing runs here; the host calls it). Reports npm's or "
        "pip's lines as progress; answers with the new capability, its tools pending your approval, the config "
        "it declares, what it can reach (its own folder read-only, a private /tmp, no network: "
        "plugin_egress_allow gives it a host) and the next "
        "steps before a visitor can call it, each an owner tool with its arguments. `role` grants it to that "
        "role now (its tools show once approved); without it no role grants it.",
        PluginAdd,
        _plugin_add,
    ),
    OwnerTool("plugins_list", "The plugins installed in the data directory.", NoArguments, _plugins_list),
    OwnerTool(
        "plugin_remove",
        "Remove an installed plugin: stop its processes, drop its tools, delete its folder; purge: true "
        "also deletes its store and config values.",
        PluginRemove,
        _plugin_remove,
    ),
    OwnerTool(
        "plugin_upgrade",
        "Upgrade an installed plugin: one from npm or PyPI to `version` (default: the newest); one from an "
        ".mcpb bundle from `source`, the new bundle's path; one from a server.json from `source` (default: the "
        "same file, read again). A source of another kind is refused. Installs the new version beside the "
        "old one (reporting npm's or pip's lines as progress), lists its tools, and switches only when that "
        "succeeds; changed tools wait for your approval again. On any failure the old version keeps running and "
        "nothing is left behind.",
        PluginUpgrade,
        _plugin_upgrade,
    ),
]
