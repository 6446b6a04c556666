-- 011_protocol_sessions: the 2025-11-25 protocol sessions born on any replica (issue 16), so
-- that another replica can open one again for the same client when its own replica is gone.
-- Written by mcp_host/store/protocol_records.py: the sha256 of the Mcp-Session-Id (never the id),
-- who opened it (the visitor session id or owner:<id>), the endpoint path, the initialize
-- request's params (at most 64 KiB of body), and when a replica last saw it open. A DELETE
-- removes the row; rows not seen for the idle timeout are removed by any replica.

CREATE TABLE mcp_host.protocol_sessions (
    key         bytea PRIMARY KEY CHECK (length(key) = 32),
    principal   text NOT NULL CHECK (length(principal) <= 256),
    path        text NOT NULL CHECK (length(path) <= 2048),
    initialize  jsonb NOT NULL,
    touched_at  timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX protocol_sessions_touched_at ON mcp_host.protocol_sessions (touched_at);
