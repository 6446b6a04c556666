"""owner_facade: the owner's MCP endpoint — capabilities, connectors, administration.

Above: the composition root `mcp_host.app.wiring`, the only module of `mcp_host` that imports this
package. Below: `mcp_host`'s public surface (each module's `__all__`).
"""

from .door import OwnerDoor
from .http import OWNER_PATH, OwnerMCPEndpoint, build_owner_server
from .services import OwnerServices, PluginParts
from .tools import TOOLS

__all__ = ["OWNER_PATH", "TOOLS", "OwnerDoor", "OwnerMCPEndpoint", "OwnerServices", "PluginParts", "build_owner_server"]
