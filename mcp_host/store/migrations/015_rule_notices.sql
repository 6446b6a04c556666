-- 015_rule_notices: a notice on channel `mcp_host_rules` whenever what a call's rules depend on
-- changes: an owner's rule set (`rule_sets`, any write) or timezone (`owners.timezone`). The
-- payload is the owner's id ('' after a TRUNCATE: every owner). Each replica caches the rule
-- set's version and the timezone only while it listens (mcp_host/store/rules.py), so any
-- writer, any replica, or SQL typed by hand invalidates every replica's copy at its commit.

CREATE FUNCTION mcp_host.rules_notice() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_LEVEL = 'STATEMENT' THEN
        PERFORM pg_notify('mcp_host_rules', '');
    ELSIF TG_TABLE_NAME = 'owners' THEN
        PERFORM pg_notify('mcp_host_rules', CASE WHEN TG_OP = 'DELETE' THEN OLD.id ELSE NEW.id END);
    ELSE
        PERFORM pg_notify('mcp_host_rules', CASE WHEN TG_OP = 'DELETE' THEN OLD.owner_id ELSE NEW.owner_id END);
        IF TG_OP = 'UPDATE' AND OLD.owner_id IS DISTINCT FROM NEW.owner_id THEN
            PERFORM pg_notify('mcp_host_rules', OLD.owner_id);
        END IF;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER rule_sets_notice AFTER INSERT OR UPDATE OR DELETE ON mcp_host.rule_sets
    FOR EACH ROW EXECUTE FUNCTION mcp_host.rules_notice();
CREATE TRIGGER rule_sets_truncated AFTER TRUNCATE ON mcp_host.rule_sets
    FOR EACH STATEMENT EXECUTE FUNCTION mcp_host.rules_notice();
CREATE TRIGGER owners_timezone_notice AFTER INSERT OR UPDATE OF timezone OR DELETE ON mcp_host.owners
    FOR EACH ROW EXECUTE FUNCTION mcp_host.rules_notice();
CREATE TRIGGER owners_truncated AFTER TRUNCATE ON mcp_host.owners
    FOR EACH STATEMENT EXECUTE FUNCTION mcp_host.rules_notice();
