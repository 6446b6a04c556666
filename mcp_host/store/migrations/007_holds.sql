-- 007_holds: a visitor's call a policy rule parked for the owner to approve or deny
-- (docs/design.md "hold"; docs/security.md E11, E16). Written by mcp_host/holds.py.
-- A hold is bound to its session, capability, tool and the sha256 of the call's arguments as
-- canonical JSON (`args_hash`); `arguments` is what the owner reads (capped in size).
-- An approval is used once: status 'approved' -> 'used' in one UPDATE, then the call runs.
-- A pending or approved hold past `expires_at` counts as expired (marked so when met).

CREATE TABLE mcp_host.holds (
    id          text PRIMARY KEY CHECK (id ~ '^h_[0-9a-f]{16}$'),
    owner_id    text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    session_id  text NOT NULL,
    capability  text NOT NULL,
    tool        text NOT NULL,
    args_hash   bytea NOT NULL CHECK (octet_length(args_hash) = 32),
    arguments   jsonb NOT NULL CHECK (jsonb_typeof(arguments) = 'object'),
    status      text NOT NULL DEFAULT 'pending'
                CHECK (status IN ('pending', 'approved', 'denied', 'used', 'expired')),
    created_at  timestamptz NOT NULL DEFAULT now(),
    expires_at  timestamptz NOT NULL,
    decided_at  timestamptz NULL,
    decided_by  text NULL,
    used_at     timestamptz NULL
);

-- One pending hold per call: concurrent first calls with the same arguments share it.
CREATE UNIQUE INDEX holds_one_pending ON mcp_host.holds (session_id, capability, tool, args_hash)
    WHERE status = 'pending';
CREATE INDEX holds_call ON mcp_host.holds (session_id, capability, tool, args_hash, created_at DESC);
CREATE INDEX holds_owner_created ON mcp_host.holds (owner_id, created_at DESC, id);
