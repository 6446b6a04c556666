-- 001_core: owners, their bearer tokens, and visitor sessions.
-- Applied by mcp_host/migrations.py inside one transaction; the schema mcp_host exists already.
-- Tokens are stored only as sha256 digests (32 bytes); the clear token never reaches the database.

CREATE TABLE mcp_host.owners (
    id          text PRIMARY KEY CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    name        text,
    email       text,
    timezone    text,
    created_at  timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE mcp_host.owner_tokens (
    owner_id    text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    token_hash  bytea NOT NULL UNIQUE CHECK (octet_length(token_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz NULL
);

-- Rotation keeps at most one live token per owner; issuing locks the owner row first, this
-- index is the backstop.
CREATE UNIQUE INDEX owner_tokens_one_live_per_owner
    ON mcp_host.owner_tokens (owner_id) WHERE revoked_at IS NULL;

CREATE TABLE mcp_host.sessions (
    id            text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{32}$'),
    owner_id      text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    token_hash    bytea NOT NULL CHECK (octet_length(token_hash) = 32),
    mode          text NOT NULL CHECK (mode IN ('public', 'code', 'api_key')),
    subject       jsonb NULL,
    visitor       jsonb NULL,
    role          jsonb NOT NULL,
    created_at    timestamptz NOT NULL DEFAULT now(),
    ended_at      timestamptz NULL,
    last_seen_at  timestamptz NULL,
    -- A public session has no subject; a code or api_key session has one of its own kind.
    CONSTRAINT sessions_subject_matches_mode CHECK (
        (mode = 'public' AND subject IS NULL)
        OR (mode <> 'public' AND subject ->> 'kind' = mode)
    )
);

CREATE INDEX sessions_owner_created ON mcp_host.sessions (owner_id, created_at);
