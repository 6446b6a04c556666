-- 017_caps_and_retention: what the caps on one visitor count and what the retention sweep
-- finds (issue 26, defects 5 and 8). Read by mcp_host/policy/holds.py (pending holds per
-- principal) and mcp_host/store/retention.py (the sweep).
-- A hold records the principal whose call made it (`code:<id>`, `api_key:<id>`,
-- `address:<ip>` or `session:<id>`); rows from before have none and count for no principal.
-- The other indexes let the sweep find its next batch without reading the whole table.

ALTER TABLE mcp_host.holds ADD COLUMN principal text NULL CHECK (length(principal) <= 256);
CREATE INDEX holds_pending_principal ON mcp_host.holds (owner_id, principal) WHERE status = 'pending';
CREATE INDEX holds_expires_at ON mcp_host.holds (expires_at);

-- A public session expires `public_session_idle_s` after its last request (or its start).
CREATE INDEX sessions_public_seen ON mcp_host.sessions ((coalesce(last_seen_at, created_at)))
    WHERE mode = 'public' AND ended_at IS NULL;
CREATE INDEX sessions_ended_at ON mcp_host.sessions (ended_at) WHERE ended_at IS NOT NULL;

CREATE INDEX turns_created_at ON mcp_host.turns (created_at);
CREATE INDEX receipts_at ON mcp_host.receipts (at);
CREATE INDEX audit_at ON mcp_host.audit (at);
