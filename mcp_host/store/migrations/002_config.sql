-- 002_config: declared config values, one JSON object per owner, plugin, scope and scope id.
-- Applied by mcp_host/migrations.py inside one transaction; the schema mcp_host exists already.
-- Values are checked against the plugin's manifest by mcp_host/config.py on every write and
-- again on every read; a key no longer declared may linger here but is never returned.

CREATE TABLE mcp_host.config_values (
    owner_id    text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    plugin_id   text NOT NULL,
    scope       text NOT NULL CHECK (scope IN ('owner', 'code', 'role', 'key')),
    -- The access code as issued, the role id or the API key's id; '' for the owner scope.
    scope_id    text NOT NULL,
    "values"    jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof("values") = 'object'),
    updated_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, plugin_id, scope, scope_id),
    -- The owner scope has exactly one row per plugin; every other scope names its code, role or key.
    CONSTRAINT config_values_scope_id_fits_scope CHECK ((scope = 'owner') = (scope_id = ''))
);
