"""Plugins as declared: the manifest model, the text and schema checks, finding and loading plugin
folders, the registry (which plugins, by id and kind), and the sources a plugin is installed
from (MCP Bundles, registry `server.json` entries). Below: `wire`. Above: store, sandbox,
children.
"""

from .bundles import (
    SANDBOX_PLUGIN_DIR,
    BundleCaps,
    BundleManifest,
    Launch,
    UserConfigField,
    UserConfigValue,
    extract_bundle,
    parse_bundle_manifest,
    resolve_launch,
)
from .install import (
    Installed,
    install_npm,
    install_pypi,
    installed,
    installed_root,
    plugins_dir,
    remove,
)
from .install_bundle import install_bundle, install_registry_entry
from .loading import LoadReport, Plugin, check_paths, load_plugins
from .manifest import (
    TOOL_NAME_RE,
    ClaimGate,
    ConfigField,
    Manifest,
    OwnerTool,
    Quota,
    Transport,
    collision_key,
    url_host,
)
from .registry import PluginKind, Registry
from .registry_entries import (
    EnvironmentVariable,
    PackageArgument,
    RegistryServer,
    StdioPackage,
    parse_server_json,
    stdio_package,
)
from .sources import BundleSource, NpmSource, PypiSource, RegistryEntrySource, Source, parse_source
from .text_safety import check_text, check_tool_schema, printable, schema_validator, shown, text_problem
from .upgrade import installed_source, stage_upgrade, switch_upgrade, upgrade_argument

__all__ = [
    "BundleCaps",
    "BundleManifest",
    "BundleSource",
    "ClaimGate",
    "ConfigField",
    "EnvironmentVariable",
    "Installed",
    "Launch",
    "LoadReport",
    "Manifest",
    "NpmSource",
    "OwnerTool",
    "PackageArgument",
    "Plugin",
    "PluginKind",
    "PypiSource",
    "Quota",
    "Registry",
    "RegistryEntrySource",
    "RegistryServer",
    "SANDBOX_PLUGIN_DIR",
    "Source",
    "StdioPackage",
    "TOOL_NAME_RE",
    "Transport",
    "UserConfigField",
    "UserConfigValue",
    "check_paths",
    "check_text",
    "check_tool_schema",
    "collision_key",
    "extract_bundle",
    "install_bundle",
    "install_npm",
    "install_pypi",
    "install_registry_entry",
    "installed",
    "installed_root",
    "installed_source",
    "load_plugins",
    "parse_bundle_manifest",
    "parse_server_json",
    "parse_source",
    "plugins_dir",
    "printable",
    "remove",
    "stage_upgrade",
    "switch_upgrade",
    "resolve_launch",
    "schema_validator",
    "shown",
    "stdio_package",
    "text_problem",
    "upgrade_argument",
    "url_host",
]
