-- 014_console_sessions: the owner's web console sessions (issue 19, part 1). Written and read
-- by owner_console/sessions.py.
-- Signing in with the owner token at /owner/login makes one row; the browser holds the cookie,
-- the host only its sha256, so a copy of this table opens no console. Every replica reads the
-- same rows (a console request may reach any of them), and signing out deletes the row, so the
-- cookie is dead everywhere at once. Rows past expires_at are refused and swept at sign-in.

CREATE TABLE mcp_host.console_sessions (
    cookie_sha256 bytea PRIMARY KEY CHECK (length(cookie_sha256) = 32),
    owner_id      text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    created_at    timestamptz NOT NULL DEFAULT now(),
    expires_at    timestamptz NOT NULL
);

CREATE INDEX console_sessions_expiry ON mcp_host.console_sessions (expires_at);
