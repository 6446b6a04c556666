-- 006_audit: one row per owner tool call (who, what, when, outcome), for `audit_list`.
-- `arguments` is a summary written by mcp_host/audit.py: secret-looking values (connector
-- settings, code and key text) are replaced before the row is written, never stored.

CREATE TABLE mcp_host.audit (
    id         bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id   text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    tool       text NOT NULL CHECK (length(tool) BETWEEN 1 AND 64),
    arguments  jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(arguments) = 'object'),
    outcome    text NOT NULL CHECK (length(outcome) BETWEEN 1 AND 64),
    at         timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX audit_owner_at ON mcp_host.audit (owner_id, at DESC, id DESC);
