"""The owner's side inside the host: the catalogue, running a capability's owner tools, and the
stdio bridge to the owner endpoint. Below: `visitor`. Above: `app` (and `owner_facade`).
"""

from .bridge import OWNER_MCP_PATH, run_owner_bridge
from .calls import OwnerCalls
from .catalogue import Catalogue, CatalogueEntry, RejectedTool, entry_for, invalid_entry
from .egress import NoRefusals, PluginEgress, RefusedDestination, RefusedDestinations, egress_of, egress_plugin

__all__ = [
    "Catalogue",
    "CatalogueEntry",
    "NoRefusals",
    "OWNER_MCP_PATH",
    "OwnerCalls",
    "PluginEgress",
    "RefusedDestination",
    "RefusedDestinations",
    "RejectedTool",
    "egress_of",
    "egress_plugin",
    "entry_for",
    "invalid_entry",
    "run_owner_bridge",
]
