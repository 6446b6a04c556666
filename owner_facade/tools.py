"""The owner tools: one table (`TOOLS`), name → argument model → handler → audit summary, made
of one slice per domain, in the order `tools/list` shows them.

Above: `door` (dispatch, error boundary, audit). Below: the slices — `capability_tools`,
`connector_tools`, `remote_tools` (sign-ins to remote servers), `config_tools`,
`access_tools`, `oauth_tools` (clients let in by OAuth), `approvals` (tools and held calls),
`app_review` (the apps tools name), `plugin_tools`, `egress_tools` (the hosts a plugin may
reach), `policy_tools` (rules, node grants, audit), `host_tools` (host settings, the owner's
profile) — each with its handlers, over `services` (the host's parts) and `models` (each
tool's arguments); `owner_tool` holds the row type.
"""

from __future__ import annotations

from typing import Any

from .access_tools import ACCESS_TOOLS
from .app_review import APP_TOOLS
from .approvals import APPROVAL_TOOLS
from .capability_tools import CAPABILITY_TOOLS
from .config_tools import CONFIG_TOOLS
from .connector_tools import CONNECTOR_TOOLS
from .egress_tools import EGRESS_TOOLS
from .host_tools import HOST_TOOLS
from .oauth_tools import OAUTH_TOOLS
from .owner_tool import Answer, OwnerTool
from .plugin_tools import PLUGIN_TOOLS
from .policy_tools import POLICY_TOOLS
from .remote_tools import REMOTE_TOOLS

__all__ = ["TOOLS", "Answer", "OwnerTool"]

_SLICES = [
    CAPABILITY_TOOLS,
    CONNECTOR_TOOLS,
    REMOTE_TOOLS,
    CONFIG_TOOLS,
    ACCESS_TOOLS,
    OAUTH_TOOLS,
    APPROVAL_TOOLS,
    APP_TOOLS,
    PLUGIN_TOOLS,
    EGRESS_TOOLS,
    POLICY_TOOLS,
    HOST_TOOLS,
]

TOOLS: dict[str, OwnerTool[Any]] = {tool.name: tool for slice_ in _SLICES for tool in slice_}
