"""Who may open which session: visitor sessions, the owner, access codes and API keys, roles.
Below: `store`. Above: connectors, policy, the doors.
"""

from .admission import Access, DeskEmail, HostSettings
from .credentials import is_code_id, is_key_id, looks_like_api_key
from .owners import OWNER_TOKEN_FILE, Owner, OwnerStore, ensure_owner_token, write_owner_token_file
from .principals import principal_of
from .session_cache import CachedSessionStore
from .sessions import PostgresSessionStore, Session, SessionStore, Subject, Visitor

__all__ = [
    "Access",
    "DeskEmail",
    "HostSettings",
    "CachedSessionStore",
    "OWNER_TOKEN_FILE",
    "Owner",
    "OwnerStore",
    "PostgresSessionStore",
    "Session",
    "SessionStore",
    "Subject",
    "Visitor",
    "ensure_owner_token",
    "is_code_id",
    "is_key_id",
    "looks_like_api_key",
    "principal_of",
    "write_owner_token_file",
]
