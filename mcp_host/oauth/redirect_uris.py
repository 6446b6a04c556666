"""The host's rules on a client's redirect URIs, for a registered client and a client's metadata
document alike.

Above: `clients` (registration) and `client_documents` (a document's URIs). Below: the SDK's
`RegistrationError`, the standard library's `ipaddress`.
"""

from __future__ import annotations

import ipaddress

from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import OAuthClientInformationFull

__all__ = ["MAX_REDIRECT_URIS", "check_redirect_uris"]

MAX_REDIRECT_URIS = 10
# Schemes a browser would run or read locally rather than hand to an application.
_REFUSED_SCHEMES = frozenset({"javascript", "data", "file", "vbscript", "blob", "about"})


def _loopback(host: str | None) -> bool:
    if host == "localhost":
        return True
    try:
        return host is not None and ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def check_redirect_uris(client: OAuthClientInformationFull) -> None:
    """The host's rules on a client's redirect URIs (OAuth 2.1 §2.3.1, RFC 8252).

    `https` anywhere; `http` only to a loopback address (a native client's local listener);
    a private-use scheme (`cursor://…`) for a native application; never a fragment, nor a
    scheme a browser runs itself. Raises `RegistrationError("invalid_redirect_uri")`.
    """
    uris = client.redirect_uris or []
    if not uris or len(uris) > MAX_REDIRECT_URIS:
        raise RegistrationError("invalid_redirect_uri", f"register 1 to {MAX_REDIRECT_URIS} redirect URIs")
    for uri in uris:
        scheme = uri.scheme.lower()
        if uri.fragment is not None:
            raise RegistrationError("invalid_redirect_uri", "a redirect URI has no fragment")
        if scheme in _REFUSED_SCHEMES or (scheme == "http" and not _loopback(uri.host)):
            raise RegistrationError("invalid_redirect_uri", f"redirect URI scheme not allowed: {scheme}")
