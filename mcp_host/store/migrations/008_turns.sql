-- 008_turns: a visitor session's turns and the tool receipts of each (docs/design.md "turn";
-- docs/security.md E12 claim gate). Written by mcp_host/turns.py.
-- A turn is numbered 1, 2, … per session; a new one is opened under a per-session advisory
-- lock. A receipt is written after a forwarded call returned, into the session's latest turn.

CREATE TABLE mcp_host.turns (
    session_id   text NOT NULL REFERENCES mcp_host.sessions (id) ON DELETE CASCADE,
    n            int NOT NULL CHECK (n >= 1),
    message      text NOT NULL,
    answer       text NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    answered_at  timestamptz NULL,
    PRIMARY KEY (session_id, n)
);

CREATE TABLE mcp_host.receipts (
    id          bigserial PRIMARY KEY,
    session_id  text NOT NULL,
    n           int NOT NULL,
    capability  text NOT NULL,
    tool        text NOT NULL,
    ok          boolean NOT NULL,
    at          timestamptz NOT NULL DEFAULT now(),
    FOREIGN KEY (session_id, n) REFERENCES mcp_host.turns (session_id, n) ON DELETE CASCADE
);

CREATE INDEX receipts_turn ON mcp_host.receipts (session_id, n, id);
