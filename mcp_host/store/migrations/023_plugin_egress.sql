-- 023_plugin_egress: where the owner lets a plugin's sandboxed children connect, beyond what
-- its manifest's transport.sandbox.egress names (issue 29, "Owner side"). Written by
-- mcp_host/store/egress_grants.py (`mcp-host plugin allow|disallow`, the owner door's
-- plugin_egress_allow / plugin_egress_remove); merged with the manifest's entries at each
-- child start. `entry` is the canonical text of one egress rule (plugins/egress_rules.py:
-- host, host:port, *.domain, *.domain:port); `private`: the entry's host is also named in
-- allow_private (it may be reached at a loopback or private address; a link-local or metadata
-- one only when the entry is that address itself). Never a wildcard with `private`.

CREATE TABLE mcp_host.plugin_egress (
    plugin_id  text NOT NULL CHECK (length(plugin_id) BETWEEN 1 AND 128),
    entry      text NOT NULL CHECK (length(entry) BETWEEN 1 AND 300),
    private    boolean NOT NULL DEFAULT false CHECK (NOT (private AND entry LIKE '*.%')),
    added_at   timestamptz NOT NULL DEFAULT now(),
    added_by   text NOT NULL CHECK (length(added_by) BETWEEN 1 AND 128),
    PRIMARY KEY (plugin_id, entry)
);
