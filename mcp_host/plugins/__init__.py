"""Plugins as declared: the manifest model, the text and schema checks, finding and loading plugin
folders, and the registry (which plugins, by id and kind). Below: `wire`. Above: store, sandbox,
children.
"""

from .loading import LoadReport, Plugin, check_paths, load_plugins
from .manifest import TOOL_NAME_RE, ClaimGate, ConfigField, Manifest, OwnerTool, Quota, collision_key
from .registry import PluginKind, Registry
from .text_safety import check_text, check_tool_schema, printable, schema_validator, shown, text_problem

__all__ = [
    "ClaimGate",
    "ConfigField",
    "LoadReport",
    "Manifest",
    "OwnerTool",
    "Plugin",
    "PluginKind",
    "Quota",
    "Registry",
    "TOOL_NAME_RE",
    "check_paths",
    "check_text",
    "check_tool_schema",
    "collision_key",
    "load_plugins",
    "printable",
    "schema_validator",
    "shown",
    "text_problem",
]
