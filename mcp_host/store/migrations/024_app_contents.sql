-- 024_app_contents: the contents of each app (MCP Apps: a `ui://` resource a plugin's tool
-- names) as the host read it from the plugin's child, by its sha256 (the hash a tool pin covers,
-- wire/apps.py `AppVersion`), so the owner can see a changed app as a diff of the approved and
-- the live version and preview either (issue 30). Written by mcp_host/store/app_contents.py when
-- the host reads an app (never one over MCP_HOST_APP_MAX_BYTES); the versions no pin approves and
-- no child serves now are deleted as they are superseded. `body` is the contents' texts joined
-- (a blob as its base64 text), whose UTF-8 bytes hash to `sha256`.

CREATE TABLE mcp_host.app_contents (
    plugin_id  text NOT NULL CHECK (length(plugin_id) BETWEEN 1 AND 128),
    sha256     text NOT NULL CHECK (sha256 ~ '^[0-9a-f]{64}$'),
    uri        text NOT NULL CHECK (length(uri) BETWEEN 1 AND 2048),
    body       text NOT NULL,
    read_at    timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (plugin_id, sha256)
);
