-- 020_oauth_grants_seen: what the owner sees of each OAuth grant, and clients known by the URL
-- of their metadata document (issue 28). Written and read by mcp_host/oauth/ only.
-- A grant's last refresh is shown to the owner next to when it was made.
-- A client that signs in with a client ID metadata document (CIMD) has that document's https
-- URL as its id; the row keeps what the document last said (its name, its redirect URIs),
-- so a grant can name its client after the document changes or stops answering.

ALTER TABLE mcp_host.oauth_grants ADD COLUMN refreshed_at timestamptz NULL;
CREATE INDEX oauth_grants_live_subject ON mcp_host.oauth_grants (subject) WHERE revoked_at IS NULL;

ALTER TABLE mcp_host.oauth_clients DROP CONSTRAINT oauth_clients_client_id_check;
ALTER TABLE mcp_host.oauth_clients ADD CONSTRAINT oauth_clients_client_id_check CHECK (length(client_id) <= 512);
