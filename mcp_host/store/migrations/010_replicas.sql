-- 010_replicas: the hosts serving on this database right now (issue 16). Written by
-- mcp_host/store/replicas.py: a row per running process (its id is random per start), its
-- URL for other replicas (MCP_HOST_REPLICA_URL), and its last heartbeat. A row is removed on a
-- clean stop; one whose heartbeats stopped is removed by any replica's next heartbeat.

CREATE TABLE mcp_host.replicas (
    id            text PRIMARY KEY CHECK (id ~ '^[0-9a-f]{16}$'),
    url           text NOT NULL CHECK (length(url) <= 2048),
    heartbeat_at  timestamptz NOT NULL DEFAULT now()
);
