"""Plugin manifests: the typed model of `manifest.yaml` and the functions that read it.

Above: `plugins` (finding, loading and installing plugin folders), and through it the registry,
the catalogue and `mcp-host check`. Below: `text_safety` (which text and which JSON Schemas are
safe; `check_text` and `check_tool_schema` are re-exported here for callers that already import
them from this package) and the YAML files.

One module per part of the concept, lowest first: `grammar` (ids, names, texts, and the
helpers every part's validation shares), `transport` (how the host reaches the plugin's
server), `checks` (what a whole manifest must hold together), `model` (`Manifest` and its
parts), `reading` (the file into a `Manifest`, or one `ManifestError` per problem).

Every model forbids unknown keys and is frozen. Three tiers of problem: *errors* stop the load;
*mistakes* (an unknown `acl`, a quota or a requirement naming a tool that is not a visitor tool,
a quota key no access code or API key can set) load, read fail-closed, and are errors to
`mcp-host check`; *warnings* load and are only shown.
"""

from mcp_host_kit.contract import MANIFEST_NAME

from ..text_safety import check_text, check_tool_schema
from .grammar import CATEGORY_RE, HOST_OPS, MAX_TITLE_CHARS, PLUGIN_ID_RE, TOOL_NAME_RE, collision_key
from .model import ClaimGate, ConfigField, ConnectorSetting, Manifest, OwnerTool, Quota, ResourceLimits
from .reading import ManifestResult, load_manifest, read_manifest
from .transport import Sandbox, Transport, url_host

__all__ = [
    "collision_key",
    "CATEGORY_RE",
    "HOST_OPS",
    "MANIFEST_NAME",
    "MAX_TITLE_CHARS",
    "PLUGIN_ID_RE",
    "TOOL_NAME_RE",
    "ClaimGate",
    "ConfigField",
    "ConnectorSetting",
    "Manifest",
    "ManifestResult",
    "OwnerTool",
    "Quota",
    "ResourceLimits",
    "Sandbox",
    "Transport",
    "check_text",
    "check_tool_schema",
    "load_manifest",
    "read_manifest",
    "url_host",
]
