-- 013_node_grants: what the owner lends to a node (issue 17, item 2). Written by
-- mcp_host/store/node_grants.py; decided on by mcp_host/policy/node_grants.py.
-- A node grant names the capabilities a node (another host, holding the token) may call here,
-- and a budget of calls. Only the sha256 of the token is kept; `used` goes up by one per
-- admitted call, in one UPDATE that also checks the budget, so it is exact across replicas.
-- A revoked grant keeps its row (revoked_at set) so the audit can still name it.

CREATE TABLE mcp_host.node_grants (
    id            text PRIMARY KEY CHECK (length(id) BETWEEN 1 AND 64),
    owner_id      text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    token_sha256  bytea NOT NULL UNIQUE CHECK (length(token_sha256) = 32),
    capabilities  text[] NOT NULL CHECK (cardinality(capabilities) BETWEEN 1 AND 100),
    calls         bigint NOT NULL CHECK (calls >= 1),
    used          bigint NOT NULL DEFAULT 0 CHECK (used >= 0 AND used <= calls),
    expires_at    timestamptz,
    note          text NOT NULL DEFAULT '' CHECK (length(note) <= 500),
    created_at    timestamptz NOT NULL DEFAULT now(),
    revoked_at    timestamptz
);

CREATE INDEX node_grants_owner ON mcp_host.node_grants (owner_id, created_at DESC);
