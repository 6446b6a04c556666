"""Clients known by the URL of their metadata document: a `client_id` that is an https URL names
a JSON document the client publishes there (OAuth Client ID Metadata Document, CIMD; the
registration the MCP 2026-07-28 revision prefers to RFC 7591's). The host fetches it, checks it
and treats what it says as the client's registration.

Above: `clients.ClientRegistry.get`, which keeps what a document last said (the grants' foreign
key, and the owner's list of clients, name it). Below: `children.RemoteGuard`, the transport a
remote plugin's requests pass, with nothing beyond public addresses allowed (`PrivateReach()`):
a name is resolved once and connected at the address checked, so loopback, private, link-local
and cloud-metadata addresses are refused before any connection, a rebinding DNS answer too.

The rules, each refusal logged (never answered: the client is then simply not found):
- the URL: `https`, a host, a path other than `/`, no user info, no fragment, no `.` or `..`
  segment, at most `MAX_URL_CHARS`; an `http` URL is no document URL (an unknown client id);
- the fetch: no redirect followed, the whole of it within `DocumentLimits.timeout_s`, at most
  `max_bytes` read (a bigger answer is dropped at that byte), uncompressed (asked for; a
  compressed answer is refused), a 200 whose body is one JSON object;
- the document: its `client_id` is the URL exactly, it names its redirect URIs (which follow
  `redirect_uris.check_redirect_uris`), it holds no `client_secret` and asks for no client
  authentication at `/token` but `none` (a public client: no secret can be shared this way);
- the cache: each good document is kept per replica for its `Cache-Control: max-age` (no
  header: `default_max_age_s`; `no-store`/`no-cache`: not kept), at most `max_age_cap_s`, the
  `entries` most recently used; a failure is never kept, so the next request fetches again.
"""

from __future__ import annotations

import json
import logging
import re
import ssl
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp.server.auth.provider import RegistrationError
from mcp.shared.auth import OAuthClientInformationFull
from pydantic import ValidationError

from mcp_host.children import RemoteGuard, Resolver, SystemResolver
from mcp_host.errors import InvalidArguments
from mcp_host.plugins import PrivateReach, printable

from .redirect_uris import check_redirect_uris

__all__ = ["MAX_URL_CHARS", "ClientDocuments", "DocumentLimits", "is_document_url"]

_logger = logging.getLogger("mcp_host.oauth.client_documents")

MAX_URL_CHARS = 512  # the column's bound (migration 020)
_MAX_AGE = re.compile(r"(?:^|,)\s*max-age\s*=\s*(\d{1,10})\s*(?:,|$)", re.IGNORECASE)
_NOT_KEPT = re.compile(r"(?:^|,)\s*(?:no-store|no-cache)\s*(?:,|$)", re.IGNORECASE)
_PUBLIC_CLIENT = frozenset({None, "none"})
# Uncompressed: the size cap counts the bytes read, and a small compressed answer can unpack huge.
_ASKING = {"Accept": "application/json", "Accept-Encoding": "identity"}


def is_document_url(client_id: str) -> bool:
    """Whether `client_id` claims to be a metadata document's URL (then only its document says
    who the client is)."""
    return client_id[:8].lower() == "https://"


@dataclass(frozen=True)
class DocumentLimits:
    """How much a client's document may cost the host, and how long a good one is kept."""

    timeout_s: float = 5.0
    max_bytes: int = 8 * 1024  # the draft suggests documents stay under 5 KB
    entries: int = 256
    default_max_age_s: float = 300.0
    max_age_cap_s: float = 86_400.0


class _Refused(InvalidArguments):
    """Why a document URL or document was refused (logged, never answered: the client is unknown)."""


class ClientDocuments:
    """Fetches, checks and caches client metadata documents."""

    def __init__(
        self,
        limits: DocumentLimits | None = None,
        *,
        resolver: Resolver | None = None,
        reach: PrivateReach | None = None,
        ssl_context: ssl.SSLContext | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """`resolver`, `reach` and `ssl_context` are the guard's (default: the system's
        resolver, public addresses only, the system's certificates); a test that serves a
        document on loopback names its host in `reach` and trusts its own CA."""
        self.limits = limits or DocumentLimits()
        self._resolver = resolver or SystemResolver()
        self._reach = reach or PrivateReach()
        self._ssl_context = ssl_context
        self._clock = clock
        self._kept: OrderedDict[str, tuple[float, OAuthClientInformationFull]] = OrderedDict()

    async def client(self, url: str) -> OAuthClientInformationFull | None:
        """The client the document at `url` describes, or None (refused: the log says why)."""
        kept = self._kept.get(url)
        if kept is not None and kept[0] > self._clock():
            self._kept.move_to_end(url)
            return kept[1]
        self._kept.pop(url, None)
        try:
            _check_url(url)
            body, max_age_s = await self._fetch(url)
            client = _client_of(url, body)
        except _Refused as why:
            _logger.warning("client metadata document %s refused: %s", printable(url), why)
            return None
        if max_age_s > 0:
            self._kept[url] = (self._clock() + max_age_s, client)
            while len(self._kept) > self.limits.entries:
                self._kept.popitem(last=False)
        return client

    async def _fetch(self, url: str) -> tuple[bytes, float]:
        """The document's bytes and how long it may be kept; raises `_Refused`."""
        host = (urlsplit(url).hostname or "").casefold()
        guard = RemoteGuard(
            frozenset({f"[{host}]" if ":" in host else host}),
            self._reach,
            self._resolver,
            ssl_context=self._ssl_context,
            purpose="client metadata document",
        )
        timeout = httpx2.Timeout(self.limits.timeout_s)
        try:
            with anyio.fail_after(self.limits.timeout_s):
                async with (
                    httpx2.AsyncClient(transport=guard, timeout=timeout, follow_redirects=False) as http,
                    http.stream("GET", url, headers=_ASKING) as response,
                ):
                    if response.status_code != 200:
                        raise _Refused(guard.refused or f"answered {response.status_code}")
                    if response.headers.get("content-encoding", "identity").lower() != "identity":
                        raise _Refused("compressed (the cap counts the bytes read)")
                    body = await self._read(response)
                    return body, self._max_age_s(response.headers.get("cache-control", ""))
        except TimeoutError:
            raise _Refused(f"not answered within {self.limits.timeout_s:g} s") from None
        except (httpx2.HTTPError, httpx2.InvalidURL) as exc:
            raise _Refused(f"could not be fetched ({type(exc).__name__})") from None

    async def _read(self, response: httpx2.Response) -> bytes:
        cap = self.limits.max_bytes
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > cap:
            raise _Refused(f"larger than {cap} bytes")
        body = bytearray()
        async for chunk in response.aiter_raw():
            body += chunk
            if len(body) > cap:
                raise _Refused(f"larger than {cap} bytes")
        return bytes(body)

    def _max_age_s(self, cache_control: str) -> float:
        if _NOT_KEPT.search(cache_control):
            return 0.0
        found = _MAX_AGE.search(cache_control)
        asked = float(found.group(1)) if found else self.limits.default_max_age_s
        return min(asked, self.limits.max_age_cap_s)


def _check_url(url: str) -> None:
    """Raises `_Refused` unless `url` may name a client's document."""
    if len(url) > MAX_URL_CHARS:
        raise _Refused(f"longer than {MAX_URL_CHARS} characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 - raises ValueError for a port that is no port
    except ValueError:
        raise _Refused("not a URL") from None
    segments = parts.path.split("/")
    if parts.scheme != "https" or not parts.hostname:
        raise _Refused("not an https URL with a host")
    if parts.username is not None or parts.password is not None or "#" in url:
        raise _Refused("a user name, a password or a fragment")
    if parts.path in ("", "/") or "." in segments or ".." in segments:
        raise _Refused("no path, or a . or .. segment")


def _client_of(url: str, body: bytes) -> OAuthClientInformationFull:
    """The client `body` describes, checked against `url`; raises `_Refused`."""
    try:
        document = json.loads(body)
    except ValueError:
        raise _Refused("not JSON") from None
    if not isinstance(document, dict):
        raise _Refused("not a JSON object")
    if document.get("client_id") != url:
        raise _Refused("its client_id is not its URL")
    if "client_secret" in document or "client_secret_expires_at" in document:
        raise _Refused("it holds a client secret")
    if document.get("token_endpoint_auth_method") not in _PUBLIC_CLIENT:
        raise _Refused("it asks for client authentication other than none")
    try:
        client = OAuthClientInformationFull.model_validate({**document, "token_endpoint_auth_method": "none"})
        check_redirect_uris(client)
    except ValidationError:
        raise _Refused("not client metadata (RFC 7591)") from None
    except RegistrationError as exc:
        raise _Refused(exc.error_description or "its redirect URIs") from None
    return client
