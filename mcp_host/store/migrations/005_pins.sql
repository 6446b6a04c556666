-- 005_pins: the definition of each plugin tool as the owner approved it, and as last seen
-- (docs/security.md E8, rug pulls). Host-wide: a tool's definition is its plugin's, not an owner's.
-- The hashes are sha256 of the definition's canonical JSON (mcp_host/pins.py).
-- approved_* NULL: the tool was never approved. approved_hash <> seen_hash: pending.

CREATE TABLE mcp_host.tool_pins (
    plugin_id            text NOT NULL,
    tool                 text NOT NULL,
    approved_hash        bytea NULL,
    approved_definition  jsonb NULL,
    approved_at          timestamptz NULL,
    seen_hash            bytea NOT NULL,
    seen_definition      jsonb NOT NULL,
    seen_at              timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plugin_id, tool)
);
