-- 012_rules: the owner's rules (issue 17) and the calls they count. Written by
-- mcp_host/store/rules.py; checked and evaluated by mcp_host/policy/rules.py.
-- `rules` is the ordered list as the owner set it (each {name, when, effect, reason}), checked
-- when set; `version` goes up by one with every set, so each replica knows when its compiled
-- copy is stale. `rule_calls` holds one row per call admitted while the owner's rules read
-- `recent` (the counts of a subject's calls in the last minute and hour); rows older than an
-- hour are deleted as new ones are written.

CREATE TABLE mcp_host.rule_sets (
    owner_id  text PRIMARY KEY REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    rules     jsonb NOT NULL CHECK (jsonb_typeof(rules) = 'array'),
    version   bigint NOT NULL CHECK (version >= 1),
    set_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE mcp_host.rule_calls (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    owner_id    text NOT NULL REFERENCES mcp_host.owners (id) ON DELETE CASCADE,
    subject     text NOT NULL CHECK (length(subject) BETWEEN 1 AND 200),
    capability  text NOT NULL CHECK (length(capability) BETWEEN 1 AND 200),
    at          timestamptz NOT NULL DEFAULT now()
);

CREATE INDEX rule_calls_subject_at ON mcp_host.rule_calls (owner_id, subject, at DESC);
