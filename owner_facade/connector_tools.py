"""The connectors slice of the owner tool table: the connectors, the owner's connections, and
calling a connected connector's verb.

Above: `tools` (the one table). Below: `services` (`Connections`, `ConnectorGateway`).
"""

from __future__ import annotations

from typing import Any

from mcp_host.connectors import Connection
from mcp_host.errors import HostError

from .models import ConnectorConnect, ConnectorDisconnect, ConnectorInvoke, NoArguments
from .owner_tool import Answer, OwnerTool
from .services import OwnerServices

__all__ = ["CONNECTOR_TOOLS"]


def _connection(c: Connection) -> dict[str, Any]:
    return {
        "category": c.category,
        "connector": c.connector,
        "settings": c.settings,
        "secrets_set": list(c.secrets_set),
        "connected_at": c.connected_at.isoformat(),
    }


async def _connectors_list(s: OwnerServices, owner_id: str, _: NoArguments) -> Answer:
    connections = {c.category: c for c in await s.connections.list(owner_id)}
    listed = []
    for plugin in s.plugins.connectors:
        m = plugin.manifest
        connection = connections.get(m.category or "")
        listed.append(
            {
                "id": m.id,
                "title": m.title,
                "description": m.description,
                "category": m.category,
                "verbs": list(m.verbs or ()),
                "settings": [st.model_dump(mode="json") for st in m.settings or ()],
                "connection": _connection(connection) if connection and connection.connector == m.id else None,
            }
        )
    return {"connectors": listed}


async def _connector_invoke(s: OwnerServices, owner_id: str, a: ConnectorInvoke) -> Answer:
    return await s.connectors.invoke(owner_id, a.category, a.verb, a.args)


async def _connector_connect(s: OwnerServices, owner_id: str, a: ConnectorConnect) -> Answer:
    connection = await s.connections.connect(owner_id, a.connector, a.settings)
    answer: dict[str, Any] = {"connection": _connection(connection)}
    plugin = s.plugin(a.connector, "connector")
    if plugin is not None and "connected" in (plugin.manifest.verbs or ()):
        # The connector's own word on whether the settings work (one call to its child).
        try:
            checked = await s.connectors.invoke(owner_id, connection.category, "connected", {})
            answer["connected"] = checked.structured_content
        except HostError as exc:
            answer["connected"] = {"code": exc.code, "message": exc.message}
    return answer


async def _connector_disconnect(s: OwnerServices, owner_id: str, a: ConnectorDisconnect) -> Answer:
    return {"disconnected": await s.connections.disconnect(owner_id, a.category)}


CONNECTOR_TOOLS: list[OwnerTool[Any]] = [
    OwnerTool(
        "connectors_list",
        "Every connector, its verbs and settings, and the owner's connection.",
        NoArguments,
        _connectors_list,
    ),
    OwnerTool(
        "connector_invoke", "Call a verb of the connector connected for `category`.", ConnectorInvoke, _connector_invoke
    ),
    OwnerTool(
        "connector_connect",
        "Connect a connector for its category (replacing the one before). Secret settings are write-only.",
        ConnectorConnect,
        _connector_connect,
    ),
    OwnerTool(
        "connector_disconnect",
        "Remove the owner's connection for `category`.",
        ConnectorDisconnect,
        _connector_disconnect,
    ),
]
