"""The remote child's only way out (`RemoteGuard`, an httpx transport). It asks what a host name
resolves to of an `egress.Resolver` (`SystemResolver`, and `MemoryResolver` for tests; they
live in `egress`, below `children`, where the sandboxed children's proxy resolves too).

Each request goes to a host the manifest allows (`allowed_hosts`; absent: the url's host), or is
answered 421 here without leaving the host. A name is resolved once, here, and every address it
resolves to must be one the manifest lets it reach (`plugins.PrivateReach`: a public address, or
one `transport.allow_private` permits); the connection then goes to the first of those
addresses that accepts it, never to the answer of a second lookup, so a DNS server that answers
a public address to the check and a loopback one to the connection (DNS rebinding) reaches
nothing. The request still speaks to the name: its Host header, and over TLS its SNI and the
certificate checked against the name. Each host name has a connection pool of its own, so a
connection whose certificate was checked for one name never carries another's requests.

Above: `remote.RemoteChild` (the transport of its streamable-HTTP client) and
`oauth.client_documents` (a client's metadata document is fetched through it). Below: httpx2's
`AsyncHTTPTransport`, `egress.Resolver`, `plugins.PrivateReach`.
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Sequence

import anyio
import httpx2

from mcp_host.egress import MemoryResolver, Resolver, SystemResolver
from mcp_host.plugins import Address, PrivateReach, literal_address

__all__ = ["MemoryResolver", "RemoteGuard", "Resolver", "SystemResolver"]

logger = logging.getLogger(__name__)

_REFUSED_STATUS = 421  # what the guard answers for a request it does not let out
_MAX_TRIED = 4  # addresses of one name tried in turn when a connection is refused


class RemoteGuard(httpx2.AsyncBaseTransport):
    """Lets a request out only to an allowed host at an address the manifest permits, connected
    to the address it checked. Also notes a 401/403 answer, and whether a 401 asked for an
    OAuth sign-in (named the server's protected-resource metadata, RFC 9728)."""

    def __init__(
        self,
        allowed: frozenset[str] | None,
        reach: PrivateReach,
        resolver: Resolver,
        *,
        ssl_context: ssl.SSLContext | None = None,
        purpose: str = "remote plugin",
    ) -> None:
        """`allowed`: lower-cased host names, an IPv6 address in [brackets]; None: any host (at an
        address `reach` permits: a sign-in's authorization server, wherever the remote server's
        metadata names it). `ssl_context`: the certificates trusted over TLS (None: the system's).
        `purpose`: who sends, for the log."""
        self._purpose = purpose
        self._allowed = allowed
        self._reach = reach
        self._resolver = resolver
        self._verify: ssl.SSLContext | bool = True if ssl_context is None else ssl_context
        self._pools: dict[str, httpx2.AsyncHTTPTransport] = {}
        self.denied: int | None = None
        """The last 401/403 status the server answered (None when it answered otherwise since)."""
        self.refused: str | None = None
        """Why the last request refused here was refused."""
        self.challenged = False
        """Whether a 401 answer named the server's protected-resource metadata: it wants a sign-in."""

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        host = request.url.host.casefold()
        shown = f"[{host}]" if ":" in host else host
        if self._allowed is not None and shown not in self._allowed:
            return self._refuse(request, shown, f"{shown} is not in the plugin's allowed_hosts")
        literal = literal_address(host)
        addresses = [literal] if literal is not None else await self._resolve(request)
        for address in addresses:
            why = self._reach.refusal(host, address)
            if why is not None:
                return self._refuse(request, shown, why)
        response = await self._send(request, addresses[:_MAX_TRIED], named=literal is None)
        if response.status_code in (401, 403):
            self.denied = response.status_code
            if response.status_code == 401:
                self.challenged = "resource_metadata=" in response.headers.get("www-authenticate", "")
        elif response.status_code < 400:
            self.denied = None
        return response

    async def _resolve(self, request: httpx2.Request) -> Sequence[Address]:
        """The addresses of the request's host, within its connect timeout."""
        name = request.url.raw_host.decode("ascii")  # the IDNA form DNS knows
        port = request.url.port or (443 if request.url.scheme == "https" else 80)
        timeout = request.extensions.get("timeout", {}).get("connect")
        try:
            with anyio.fail_after(timeout):
                return await self._resolver.resolve(name, port)
        except TimeoutError:
            raise httpx2.ConnectTimeout(f"resolving {name} timed out", request=request) from None
        except OSError as exc:
            raise httpx2.ConnectError(f"{name} could not be resolved", request=request) from exc

    async def _send(self, request: httpx2.Request, addresses: Sequence[Address], *, named: bool) -> httpx2.Response:
        """`request` sent to the first of `addresses` that takes a connection; a named host's
        request keeps its name in the Host header and for TLS (SNI and the certificate)."""
        name = request.url.raw_host.decode("ascii")
        pool = self._pools.get(name)
        if pool is None:
            pool = self._pools[name] = httpx2.AsyncHTTPTransport(verify=self._verify, retries=0, trust_env=False)
        if not named:
            return await pool.handle_async_request(request)
        failure: httpx2.ConnectError | None = None
        for address in addresses:
            forwarded = httpx2.Request(
                request.method,
                request.url.copy_with(host=str(address)),
                headers=request.headers,  # the Host header the client set: the name
                stream=request.stream,
                extensions={**request.extensions, "sni_hostname": name},
            )
            try:
                return await pool.handle_async_request(forwarded)
            except httpx2.ConnectError as exc:  # nothing was sent: the next address may take it
                failure = exc
        assert failure is not None  # `addresses` is never empty
        raise failure

    def _refuse(self, request: httpx2.Request, shown: str, why: str) -> httpx2.Response:
        self.refused = why
        logger.warning("%s: refused a request to %s: %s", self._purpose, shown, why)
        return httpx2.Response(_REFUSED_STATUS, request=request)

    async def aclose(self) -> None:
        pools, self._pools = list(self._pools.values()), {}
        for pool in pools:
            await pool.aclose()
