-- 021_remote_sign_ins: the host's sign-in to each remote plugin's server that asks for one
-- (OAuth 2.1, the host as the client). One row per plugin, read by every replica.
-- `client` (the registration the server gave the host) and `tokens` (access and refresh
-- token) are sealed with the host key (mcp_host/store/secrets_box.py), bound to the plugin
-- and the column, never in clear. `metadata` is the server's public discovery documents (its
-- protected-resource and authorization-server metadata), kept so a refresh after a restart
-- goes to the token endpoint the server named. `needs_sign_in`: why the server wants the
-- owner to sign in again (no tokens, or its refresh token expired); NULL while signed in.

CREATE TABLE mcp_host.remote_sign_ins (
    plugin_id      text PRIMARY KEY,
    client         text NULL,
    tokens         text NULL,
    expires_at     timestamptz NULL,
    refreshable    boolean NOT NULL DEFAULT false,
    metadata       jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
    needs_sign_in  text NULL,
    updated_at     timestamptz NOT NULL DEFAULT now()
);
