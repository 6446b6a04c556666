-- 018_oauth: the host as an OAuth 2.1 authorization server for its own doors (issue 28, item 1).
-- Written and read by mcp_host/oauth/ only.
-- Every replica reads the same rows, so a client may register on one replica, be sent to the
-- front desk by another and redeem its code at a third. Codes, tokens and pending requests are
-- kept as sha256 digests: a copy of these tables signs nobody in. A client's secret is sealed
-- with the host key (the SDK's client authentication compares the secret itself).

CREATE TABLE mcp_host.oauth_clients (
    client_id     text PRIMARY KEY CHECK (length(client_id) <= 64),
    metadata      jsonb NOT NULL,
    secret_sealed text NULL,
    created_at    timestamptz NOT NULL DEFAULT now()
);

-- An authorization request waiting at the front desk for the person behind the client.
CREATE TABLE mcp_host.oauth_requests (
    request_sha256 bytea PRIMARY KEY CHECK (length(request_sha256) = 32),
    client_id      text NOT NULL REFERENCES mcp_host.oauth_clients (client_id) ON DELETE CASCADE,
    params         jsonb NOT NULL,
    expires_at     timestamptz NOT NULL
);
CREATE INDEX oauth_requests_expires_at ON mcp_host.oauth_requests (expires_at);

-- What the front desk let one client do: one subject (a visitor session), at one resource
-- (a door), with some scopes. Its codes and tokens die with it.
CREATE TABLE mcp_host.oauth_grants (
    id         text PRIMARY KEY CHECK (length(id) <= 64),
    client_id  text NOT NULL REFERENCES mcp_host.oauth_clients (client_id) ON DELETE CASCADE,
    subject    text NOT NULL CHECK (length(subject) <= 256),
    resource   text NOT NULL CHECK (length(resource) <= 2048),
    scopes     text[] NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    revoked_at timestamptz NULL
);
CREATE INDEX oauth_grants_subject ON mcp_host.oauth_grants (subject);

CREATE TABLE mcp_host.oauth_codes (
    code_sha256    bytea PRIMARY KEY CHECK (length(code_sha256) = 32),
    grant_id       text NOT NULL REFERENCES mcp_host.oauth_grants (id) ON DELETE CASCADE,
    code_challenge text NOT NULL CHECK (length(code_challenge) <= 128),
    redirect_uri   text NOT NULL,
    expires_at     timestamptz NOT NULL,
    used_at        timestamptz NULL
);
CREATE INDEX oauth_codes_grant ON mcp_host.oauth_codes (grant_id);

-- Access and refresh tokens. A refresh token is spent (used_at) when it is rotated; showing
-- it again is a replay, and revokes its grant.
CREATE TABLE mcp_host.oauth_tokens (
    token_sha256 bytea PRIMARY KEY CHECK (length(token_sha256) = 32),
    grant_id     text NOT NULL REFERENCES mcp_host.oauth_grants (id) ON DELETE CASCADE,
    kind         text NOT NULL CHECK (kind IN ('access', 'refresh')),
    scopes       text[] NOT NULL,
    expires_at   timestamptz NOT NULL,
    used_at      timestamptz NULL
);
CREATE INDEX oauth_tokens_grant ON mcp_host.oauth_tokens (grant_id);
CREATE INDEX oauth_tokens_expires_at ON mcp_host.oauth_tokens (expires_at);
