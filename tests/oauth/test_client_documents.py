"""Clients known by their metadata document (CIMD), through the SDK's own handlers on real
PostgreSQL, the documents served over TLS on loopback by the test. The host reaches that
server only because the test's `ClientDocuments` names its host in the guard's `reach` (the
seam remote plugins' tests use: `transport.allow_private`); by default nothing but public
addresses is reached. Hostile cases: a private address, a slow answer, a huge one, a
mismatched client_id, a redirect URI not in the document, a non-https URL, a secret."""

from __future__ import annotations

import gzip
import json
import ssl
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx2
import pytest
from anyio.abc import SocketAttribute
from anyio.streams.tls import TLSListener
from starlette.applications import Starlette

from mcp_host.children import MemoryResolver
from mcp_host.oauth import AuthorizationServer, ClientDocuments, DocumentLimits, oauth_routes
from mcp_host.plugins import PrivateReach
from mcp_host.store import PgPool, SecretBox
from tests.certificates import tls_pair

from .conftest import DOOR, ISSUER, OWNER_DOOR, REDIRECT, DecidingDesk, authorize, pkce, query, redeem

pytestmark = pytest.mark.anyio

NAME = "docs.client.test"  # resolved by the test's resolver only
PRIVATE = "intranet.client.test"
LIMITS = DocumentLimits(timeout_s=1.0, max_bytes=4096)


@dataclass
class Answer:
    body: bytes
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0
    streamed: bool = False
    """Sent in 1 KiB pieces without a Content-Length (a stream with no end known)."""


@dataclass
class DocumentServer:
    port: int
    answers: dict[str, Answer] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)

    def url(self, path: str, host: str = NAME) -> str:
        return f"https://{host}:{self.port}{path}"

    def document(self, path: str, **fields: Any) -> str:
        """Serve a good document at `path` (its fields overridden by `fields`); its URL."""
        url = self.url(path)
        body = {"client_id": url, "client_name": "Docs client", "redirect_uris": [REDIRECT], **fields}
        self.answers[path] = Answer(json.dumps(body).encode())
        return url


@asynccontextmanager
async def document_server(tls: ssl.SSLContext) -> AsyncIterator[DocumentServer]:
    """A TLS server on loopback answering each `GET <path>` from `answers`."""
    listener: Any = await anyio.create_tcp_listener(local_host="127.0.0.1")
    server = DocumentServer(listener.extra(SocketAttribute.local_port))

    async def serve(stream: Any) -> None:
        async with stream:
            head = b""
            with suppress(anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive()
                path = head.split(b" ", 2)[1].decode()
                server.asked.append(path)
                await _answer(stream, server.answers.get(path, Answer(b"{}", status=404)))

    async with TLSListener(listener, tls, standard_compatible=False) as tls_listener, anyio.create_task_group() as tg:
        tg.start_soon(tls_listener.serve, serve)
        yield server
        tg.cancel_scope.cancel()


async def _answer(stream: Any, answer: Answer) -> None:
    await anyio.sleep(answer.delay_s)
    length = {} if answer.streamed else {"content-length": str(len(answer.body))}
    headers = {"content-type": "application/json", "connection": "close", **length, **answer.headers}
    head = f"HTTP/1.1 {answer.status} X\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items()) + "\r\n"
    await stream.send(head.encode())
    step = 1024 if answer.streamed else len(answer.body) or 1
    for start in range(0, len(answer.body), step):
        await stream.send(answer.body[start : start + step])


@pytest.fixture
async def served() -> AsyncIterator[tuple[DocumentServer, ssl.SSLContext]]:
    pair = tls_pair(NAME)
    server_tls, client_tls = pair.server, pair.client
    async with document_server(server_tls) as server:
        yield server, client_tls


def _documents(client_tls: ssl.SSLContext, resolver: MemoryResolver, reach: PrivateReach | None) -> ClientDocuments:
    return ClientDocuments(LIMITS, resolver=resolver, reach=reach, ssl_context=client_tls)


@pytest.fixture
def resolver() -> MemoryResolver:
    return MemoryResolver({NAME: ["127.0.0.1"], PRIVATE: ["10.1.2.3"]})


@pytest.fixture
def cimd_server(
    pool: PgPool, desk: DecidingDesk, served: tuple[DocumentServer, ssl.SSLContext], resolver: MemoryResolver
) -> AuthorizationServer:
    """The authorization server, fetching documents from the test's server past the guard."""
    documents = _documents(served[1], resolver, PrivateReach.of([NAME]))
    return AuthorizationServer(
        pool, SecretBox(bytes(32)), issuer=ISSUER, resources=[DOOR, OWNER_DOOR], desk=desk, documents=documents
    )


@pytest.fixture
async def cimd_http(cimd_server: AuthorizationServer) -> AsyncIterator[httpx2.AsyncClient]:
    app = Starlette(routes=oauth_routes(cimd_server))
    async with httpx2.AsyncClient(transport=httpx2.ASGITransport(app=app), base_url=ISSUER) as client:
        yield client


async def test_a_client_signs_in_by_its_document_url_without_registering(
    cimd_http: httpx2.AsyncClient,
    cimd_server: AuthorizationServer,
    desk: DecidingDesk,
    served: tuple[DocumentServer, ssl.SSLContext],
) -> None:
    server = served[0]
    url = server.document("/oauth/client.json")
    server.answers["/oauth/client.json"].headers["cache-control"] = "public, max-age=60"
    verifier, challenge = pkce()

    metadata = (await cimd_http.get("/.well-known/oauth-authorization-server")).json()
    sent = await authorize(cimd_http, {"client_id": url}, challenge)
    again = await authorize(cimd_http, {"client_id": url}, challenge)  # from the cache
    back = await cimd_server.approve(desk.waiting[0].request_id, "owner:o1")
    assert back is not None
    tokens = await redeem(cimd_http, {"client_id": url}, query(back)["code"], verifier)

    assert metadata["client_id_metadata_document_supported"] is True
    assert (sent.status_code, again.status_code) == (302, 302)
    assert (desk.waiting[0].client_id, desk.waiting[0].client_name) == (url, "Docs client")
    assert tokens.status_code == 200, tokens.text
    assert server.asked == ["/oauth/client.json"]  # kept for its max-age: fetched once
    stored = await cimd_server.get_client(url)
    assert stored is not None and stored.token_endpoint_auth_method == "none"


@pytest.mark.parametrize(
    ("cache_control", "fetches"), [("no-store", 2), ("max-age=0", 2), ("max-age=999999999", 1), (None, 1)]
)
async def test_a_document_is_kept_for_its_max_age_within_bounds(
    cimd_server: AuthorizationServer,
    served: tuple[DocumentServer, ssl.SSLContext],
    cache_control: str | None,
    fetches: int,
) -> None:
    server = served[0]
    url = server.document("/c.json")
    if cache_control is not None:
        server.answers["/c.json"].headers["cache-control"] = cache_control
    found = [await cimd_server.get_client(url) for _ in range(2)]
    assert all(f is not None for f in found) and len(server.asked) == fetches


async def test_a_failed_fetch_is_not_kept(
    cimd_server: AuthorizationServer, served: tuple[DocumentServer, ssl.SSLContext]
) -> None:
    server = served[0]
    url = server.url("/flaky.json")
    server.answers["/flaky.json"] = Answer(b"{}", status=503)
    first = await cimd_server.get_client(url)
    server.document("/flaky.json")
    second = await cimd_server.get_client(url)
    assert (first, second is not None, server.asked) == (None, True, ["/flaky.json", "/flaky.json"])


async def test_a_document_url_at_a_private_address_is_never_fetched(
    cimd_http: httpx2.AsyncClient, served: tuple[DocumentServer, ssl.SSLContext], resolver: MemoryResolver
) -> None:
    url = served[0].url("/client.json", host=PRIVATE)
    refused = await authorize(cimd_http, {"client_id": url}, pkce()[1])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"
    assert resolver.asked == [PRIVATE] and served[0].asked == []


async def test_by_default_only_public_addresses_are_reached(served: tuple[DocumentServer, ssl.SSLContext]) -> None:
    server, client_tls = served
    url = server.document("/client.json")
    default_reach = _documents(client_tls, MemoryResolver({NAME: ["127.0.0.1"]}), None)
    assert await default_reach.client(url) is None
    assert server.asked == []


async def test_a_slow_document_is_given_up_on_within_the_time_cap(
    cimd_server: AuthorizationServer, served: tuple[DocumentServer, ssl.SSLContext]
) -> None:
    server = served[0]
    url = server.document("/slow.json")
    server.answers["/slow.json"].delay_s = 30.0
    started = time.monotonic()
    assert await cimd_server.get_client(url) is None
    assert time.monotonic() - started < LIMITS.timeout_s + 1.0


@pytest.mark.parametrize("declared", [True, False])
async def test_a_huge_document_is_dropped_at_the_size_cap(
    cimd_server: AuthorizationServer, served: tuple[DocumentServer, ssl.SSLContext], declared: bool
) -> None:
    server = served[0]
    url = server.url("/huge.json")
    # A good document but for its 1 MiB name: only the cap refuses it.
    huge = {"client_id": url, "redirect_uris": [REDIRECT], "client_name": "x" * (1 << 20)}
    server.answers["/huge.json"] = Answer(json.dumps(huge).encode(), streamed=not declared)
    started = time.monotonic()
    assert await cimd_server.get_client(url) is None
    assert time.monotonic() - started < LIMITS.timeout_s


async def test_a_compressed_document_is_refused_unpacked_never(
    cimd_server: AuthorizationServer, served: tuple[DocumentServer, ssl.SSLContext], caplog: pytest.LogCaptureFixture
) -> None:
    # A good document, gzipped: unpacking is what a small answer could blow up in, so it is not done.
    server = served[0]
    url = server.url("/packed.json")
    packed = gzip.compress(json.dumps({"client_id": url, "redirect_uris": [REDIRECT]}).encode())
    server.answers["/packed.json"] = Answer(packed, headers={"content-encoding": "gzip"})
    assert await cimd_server.get_client(url) is None
    assert "refused: compressed" in caplog.text


@pytest.mark.parametrize(
    "fields",
    [
        {"client_id": "https://other.example/client.json"},
        {"client_secret": "s3cret"},
        {"token_endpoint_auth_method": "client_secret_basic"},
        {"redirect_uris": ["http://evil.example/cb"]},
        {"redirect_uris": []},
        {"redirect_uris": "not a list"},
    ],
    ids=["mismatched-client-id", "secret", "secret-auth", "http-redirect", "no-redirect", "malformed"],
)
async def test_a_document_that_breaks_a_rule_is_refused(
    cimd_http: httpx2.AsyncClient, served: tuple[DocumentServer, ssl.SSLContext], fields: dict[str, Any]
) -> None:
    url = served[0].document("/bad.json", **fields)
    refused = await authorize(cimd_http, {"client_id": url}, pkce()[1])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"
    assert "not found" in refused.json()["error_description"]


async def test_a_redirect_uri_not_in_the_document_is_refused_without_a_redirect(
    cimd_http: httpx2.AsyncClient, desk: DecidingDesk, served: tuple[DocumentServer, ssl.SSLContext]
) -> None:
    url = served[0].document("/client.json")
    refused = await authorize(cimd_http, {"client_id": url}, pkce()[1], redirect_uri="http://127.0.0.1:9/elsewhere")
    assert refused.status_code == 400 and "not registered" in refused.json()["error_description"]
    assert desk.waiting == []


@pytest.mark.parametrize(
    "url",
    [
        f"http://{NAME}/client.json",
        f"https://{NAME}",
        f"https://{NAME}/",
        f"https://{NAME}/a/../client.json",
        f"https://user:pw@{NAME}/client.json",
        f"https://{NAME}/client.json#frag",
        f"https://{NAME}/{'x' * 600}",
    ],
    ids=["http", "no-path", "root-path", "dot-segment", "user-info", "fragment", "too-long"],
)
async def test_a_url_that_cannot_name_a_document_is_never_fetched(
    cimd_http: httpx2.AsyncClient, resolver: MemoryResolver, url: str
) -> None:
    refused = await authorize(cimd_http, {"client_id": url}, pkce()[1])
    assert refused.status_code == 400 and refused.json()["error"] == "invalid_request"
    assert resolver.asked == []
