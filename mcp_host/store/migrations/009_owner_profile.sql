-- 009_owner_profile: bounds on the owner's profile (name, email address, timezone).
-- The owner sets it through the owner door (owner_profile_set), where owners.check_profile is
-- the rule; these constraints are the backstop for any other writer. NOT VALID: rows written
-- before this migration are not scanned (a start never fails on them), new writes are checked.

ALTER TABLE mcp_host.owners
    ADD CONSTRAINT owners_name_bounds
        CHECK (char_length(name) BETWEEN 1 AND 128 AND name !~ '[[:cntrl:]]') NOT VALID,
    ADD CONSTRAINT owners_email_bounds
        CHECK (char_length(email) BETWEEN 3 AND 254 AND email ~ '^[^@[:space:]]+@[^@[:space:]]+$') NOT VALID,
    ADD CONSTRAINT owners_timezone_bounds
        CHECK (char_length(timezone) BETWEEN 1 AND 64 AND timezone ~ '^[A-Za-z0-9_+/-]+$') NOT VALID;
