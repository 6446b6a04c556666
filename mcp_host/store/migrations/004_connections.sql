-- 004_connections: the connector an owner connected for each category, with its settings.
-- Secret settings never sit here in clear: `secrets` is sealed with the host key
-- (mcp_host/secrets_box.py), bound to (owner, category, connector).

CREATE TABLE mcp_host.connections (
    owner_id      text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    category      text NOT NULL CHECK (category ~ '^[a-z][a-z0-9_]{0,31}$'),
    connector_id  text NOT NULL,
    settings      jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(settings) = 'object'),
    secrets       text NULL,
    connected_at  timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, category)
);
