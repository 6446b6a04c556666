-- 022_desk_email: whether the front desk asks a visitor's email (issue 28: "asks the visitor's
-- name, and email where the owner wants it"): `off` (not asked), `optional` (asked, may be
-- left empty; the default, as before) or `required`. Read through access.Access.host_settings,
-- set with the owner door's host_settings_set; the desk (mcp_host/desk) follows it.

ALTER TABLE mcp_host.host_settings
    ADD COLUMN desk_email text NOT NULL DEFAULT 'optional'
        CHECK (desk_email IN ('off', 'optional', 'required'));
