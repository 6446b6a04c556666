"""The `_meta` keys of a forwarded call (docs/design.md "Plugin ABI").

Above: the host (`mcp_host.wire.meta`, which writes them and drops look-alikes a visitor or a
child sends; `children.call_routing`; `connectors`; the doors) and the kit (`session`,
`visitor`, `connection`), which reads them. Below: nothing.

Every key the host writes lives under `HOST_PREFIX`; no visitor or child may set one.
"""

from __future__ import annotations

__all__ = [
    "CALL_KEY",
    "CAPABILITY_KEY",
    "CONNECTION_KEY",
    "ERROR_KEY",
    "GRANT_KEY",
    "HOST_PREFIX",
    "QUOTA_KEY",
    "REQUEST_ID_KEY",
    "RESERVED_LABELS",
    "SERVER_INFO_KEY",
    "SESSION_KEY",
]

HOST_PREFIX = "mcp-host/"
SESSION_KEY = "mcp-host/session"
"""On each forwarded call: the trusted session scope (owner, subject, visitor)."""
GRANT_KEY = "mcp-host/grant"
"""On each forwarded call of a plugin that named host ops: the token every op of the call presents."""
CALL_KEY = "mcp-host/call"
"""On each forwarded call: its random id; a child echoes it on a request to that call's visitor."""
CONNECTION_KEY = "mcp-host/connection"
"""On a connector's call: the owner's connection of its category, secrets opened."""
ERROR_KEY = "mcp-host/error"
"""On a refusal the host wrote itself (`isError`): `{code, message}`, machine-readable whether or
not the result also carries them as structured content (it does not for a tool that declares an
`outputSchema`: clients check structured content against it even on an error). A child's result
never carries it: the host drops a child's copy, so it cannot pass for the host's refusal."""
QUOTA_KEY = "mcp-host/quota"
"""On a visitor's `tools/list` result: the quota left per tool."""
CAPABILITY_KEY = "mcp-host/capability"
"""On each tool a parent's node endpoint lists: the lent capability it belongs to (the node
groups its tools by it)."""
REQUEST_ID_KEY = "mcp-host/request-id"
"""On a node's call to its parent's node endpoint: the node's request id, so both hosts' audits
name the call."""
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
"""A protocol key a child's result may carry; the host drops it before a visitor sees it."""
RESERVED_LABELS = frozenset({"modelcontextprotocol", "mcp"})
"""MCP reserves every `_meta` prefix whose second label is one of these (basic spec, "_meta")."""
