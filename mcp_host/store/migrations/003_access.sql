-- 003_access: roles, access codes, API keys and the owner's host settings (who may see what).
-- Applied by mcp_host/migrations.py inside one transaction; the schema mcp_host exists already.
-- Codes and keys are stored only as sha256 digests (32 bytes); their text is shown once, at
-- creation, and never reaches the database. Rows are revoked, never deleted: a session's
-- subject keeps pointing at its credential (sessions.authenticate reads `revoked_at`).
-- Role, code and key config values live in mcp_host.config_values (scope role / code / key,
-- scope_id = the role id, the code's id, the key's id).

CREATE TABLE mcp_host.roles (
    owner_id      text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    id            text NOT NULL CHECK (id ~ '^[a-z0-9][a-z0-9_-]{0,63}$'),
    capabilities  text[] NOT NULL DEFAULT '{}',
    created_at    timestamptz NOT NULL DEFAULT now(),
    updated_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (owner_id, id)
);

CREATE TABLE mcp_host.access_codes (
    id          text PRIMARY KEY CHECK (id ~ '^c_[0-9a-f]{16}$'),
    owner_id    text NOT NULL,
    role_id     text NOT NULL,
    code_hash   bytea NOT NULL UNIQUE CHECK (octet_length(code_hash) = 32),
    expires_at  timestamptz NULL,
    max_uses    integer NULL CHECK (max_uses > 0),
    -- Counted by one UPDATE … WHERE uses < max_uses, so concurrent redemptions never pass it.
    uses        integer NOT NULL DEFAULT 0 CHECK (uses >= 0 AND (max_uses IS NULL OR uses <= max_uses)),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz NULL,
    FOREIGN KEY (owner_id, role_id) REFERENCES mcp_host.roles (owner_id, id) ON DELETE CASCADE
);

CREATE INDEX access_codes_owner_created ON mcp_host.access_codes (owner_id, created_at);

CREATE TABLE mcp_host.api_keys (
    id          text PRIMARY KEY CHECK (id ~ '^k_[0-9a-f]{16}$'),
    owner_id    text NOT NULL,
    role_id     text NOT NULL,
    key_hash    bytea NOT NULL UNIQUE CHECK (octet_length(key_hash) = 32),
    created_at  timestamptz NOT NULL DEFAULT now(),
    revoked_at  timestamptz NULL,
    FOREIGN KEY (owner_id, role_id) REFERENCES mcp_host.roles (owner_id, id) ON DELETE CASCADE
);

CREATE INDEX api_keys_owner_created ON mcp_host.api_keys (owner_id, created_at);

-- One row per owner, made at start with the defaults; the public role must exist.
CREATE TABLE mcp_host.host_settings (
    owner_id         text PRIMARY KEY REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    public_sessions  boolean NOT NULL DEFAULT true,
    public_role      text NOT NULL DEFAULT 'public',
    updated_at       timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (owner_id, public_role) REFERENCES mcp_host.roles (owner_id, id)
);
