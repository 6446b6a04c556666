-- 016_tool_search: the owner's tool search threshold (issue 19, part 2). A visitor session that
-- sees more tools than this lists a working set and the host's find_tools and call_tool
-- (mcp_host/visitor/tool_search.py); at or under it, every tool as before. Read through
-- access.Access.host_settings, set with the owner door's host_settings_set.

ALTER TABLE mcp_host.host_settings
    ADD COLUMN tool_search_threshold integer NOT NULL DEFAULT 40
        CHECK (tool_search_threshold BETWEEN 0 AND 100000);
