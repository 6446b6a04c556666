-- 019_session_token_lookup: a live visitor session found by its token's digest alone (issue 28:
-- a client at the one visitor URL, `/mcp`, shows its session's bearer token without the id).
-- Read by mcp_host/access/sessions.py (`by_token`). Ended sessions' tokens are never looked up.

CREATE INDEX sessions_live_token_hash ON mcp_host.sessions (token_hash) WHERE ended_at IS NULL;
-- The session an API key uses at `/mcp` (`live_of`): its subject's oldest live one.
CREATE INDEX sessions_live_subject ON mcp_host.sessions (owner_id, (subject ->> 'id'), created_at)
    WHERE ended_at IS NULL AND subject IS NOT NULL;
