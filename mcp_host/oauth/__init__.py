"""The host as an OAuth 2.1 authorization server for its own doors (issue 28, item 1), built on
the MCP SDK's `mcp.server.auth`: clients (registered, or known by their metadata document),
grants, codes and tokens in PostgreSQL, resource indicators, the front desk seam, and the routes.
Below: `store` (the pool, the host key's `SecretBox`), `children` (the remote plugins' guard,
through which a client's metadata document is fetched), `plugins` (`PrivateReach`). Above:
`visitor` and `owner_facade` (the doors check tokens with a `DoorTokenVerifier`; the owner door
lists and revokes grants), `desk` (the front desk), `app` (builds the one `AuthorizationServer`,
`Shared.oauth`, and serves the routes).
"""

from .client_documents import ClientDocuments, DocumentLimits
from .front_desk import FrontDesk, PendingAuthorization
from .grants import OWNER_SUBJECT_PREFIX, OAuthGrant, OAuthGrants, SubjectKind, end_owner_grants, owner_subject
from .resources import DoorTokenVerifier, canonical_resource, token_fits
from .routes import OAUTH_PATHS, RESOURCE_METADATA_PREFIX, oauth_routes, resource_metadata_url
from .server import AuthorizationServer, GrantedAccessToken, GrantedCode, GrantedRefreshToken, Lifetimes, digest

__all__ = [
    "OAUTH_PATHS",
    "RESOURCE_METADATA_PREFIX",
    "OWNER_SUBJECT_PREFIX",
    "AuthorizationServer",
    "ClientDocuments",
    "DocumentLimits",
    "DoorTokenVerifier",
    "FrontDesk",
    "OAuthGrant",
    "OAuthGrants",
    "GrantedAccessToken",
    "GrantedCode",
    "GrantedRefreshToken",
    "Lifetimes",
    "PendingAuthorization",
    "SubjectKind",
    "canonical_resource",
    "digest",
    "end_owner_grants",
    "oauth_routes",
    "owner_subject",
    "resource_metadata_url",
    "token_fits",
]
