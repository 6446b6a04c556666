"""The builtin `corpus.retrieval`: standalone (the kit's in-memory ops, an in-process MCP
client) and through a real host (owner door, visitor sessions of roles with and without a
corpus, real Postgres search, a sandboxed child)."""

from __future__ import annotations

import importlib.util
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from types import ModuleType
from typing import Any

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host_kit import SESSION_KEY
from mcp_host_kit.contract import refusal_of
from owner_facade import OWNER_PATH
from tests.hosting import BUILTINS, RunningHost, host_fixture
from tests.processes import needs_bwrap

pytestmark = pytest.mark.anyio

NOT_FOUND = "not_found"
INVALID_ARGUMENTS = "invalid_arguments"
DENIED = "denied"
UNKNOWN = "unknown"
VISITOR_TOOLS = ["corpus_list", "corpus_read", "corpus_search"]
OWNER = {"owner_id": "test-owner", "session_id": None, "mode": "owner"}
REFUNDS = (
    "Refunds are paid within 14 days. A refund goes to the card you paid with. Items damaged in "
    "transit get a full refund; keep the packaging for the refund claim."
)
SHIPPING = "We ship worldwide with tracked parcels. Shipping takes three to five days. A lost parcel gets a refund."
HANDBOOK = "Staff only: the refund override code lives in the safe. Never tell a visitor."


def _load_server() -> ModuleType:
    path = BUILTINS / "corpus_retrieval" / "server.py"
    spec = importlib.util.spec_from_file_location("corpus_retrieval_server", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def call(client: Client, name: str, /, meta: dict[str, Any] | None = None, **args: Any) -> tuple[bool, Any]:
    result = await client.call_tool(name, args, meta=meta)  # type: ignore[arg-type]
    found = refusal_of(result)  # a refusal: the host's key in `_meta`, else the plugin's structured pair
    if found is not None:
        return True, found.model_dump()
    return bool(result.is_error), result.structured_content


# -- standalone ------------------------------------------------------------------------------


@pytest.fixture
async def standalone() -> AsyncIterator[Client]:
    async with Client(_load_server().mcp, mode="legacy") as client:
        yield client


async def _add(client: Client, corpus: str, title: str, text: str, **extra: Any) -> str:
    failed, added = await call(
        client, "corpus_add", meta={SESSION_KEY: OWNER}, corpus=corpus, title=title, text=text, **extra
    )
    assert not failed, added
    return str(added["id"])


async def test_standalone_lists_only_the_visitor_tools(standalone: Client) -> None:
    assert sorted(t.name for t in (await standalone.list_tools()).tools) == VISITOR_TOOLS


async def test_standalone_owner_adds_and_a_visitor_finds_reads_and_lists(standalone: Client) -> None:
    refunds = await _add(standalone, "public", "Refunds", REFUNDS, source="Help centre", url="https://example.test/r")
    await _add(standalone, "public", "Shipping", SHIPPING)
    await _add(standalone, "staff", "Handbook", HANDBOOK)

    _, found = await call(standalone, "corpus_search", query="refund")
    _, read = await call(standalone, "corpus_read", id=refunds)
    _, listed = await call(standalone, "corpus_list")

    # The default role config reads `public` only: the handbook's "refund" is not found.
    assert [(h["title"], h["part"], h["parts"]) for h in found["hits"]] == [("Refunds", 1, 1), ("Shipping", 1, 1)]
    assert found["searched"] == ["public"]
    assert "**refund**" in found["hits"][0]["snippet"].lower()
    assert read == {
        "id": refunds,
        "corpus": "public",
        "title": "Refunds",
        "parts": 1,
        "part": 1,
        "text": REFUNDS,
        "source": "Help centre",
        "url": "https://example.test/r",
    }
    assert [(c["name"], c["count"], [d["title"] for d in c["documents"]]) for c in listed["corpora"]] == [
        ("public", 2, ["Refunds", "Shipping"])
    ]


async def test_standalone_a_corpus_the_role_does_not_list_looks_like_none(standalone: Client) -> None:
    handbook = await _add(standalone, "staff", "Handbook", HANDBOOK)
    missing = "0" * 32

    by_id = await call(standalone, "corpus_read", id=handbook)
    unknown_id = await call(standalone, "corpus_read", id=missing)
    staff_search = await call(standalone, "corpus_search", query="refund", corpus="staff")
    nowhere_search = await call(standalone, "corpus_search", query="refund", corpus="nowhere")
    staff_list = await call(standalone, "corpus_list", corpus="staff")

    assert by_id == unknown_id == (True, {"code": NOT_FOUND, "message": "no document with this id"})
    assert staff_search == (True, {"code": NOT_FOUND, "message": "no corpus named 'staff'"})
    assert nowhere_search == (True, {"code": NOT_FOUND, "message": "no corpus named 'nowhere'"})
    assert staff_list == staff_search


async def test_standalone_owner_tools_refuse_a_visitor(standalone: Client) -> None:
    failed, answer = await call(standalone, "corpus_add", corpus="public", title="x", text="y")
    assert (failed, answer["code"]) == (True, DENIED)


async def test_standalone_owner_lists_and_removes_documents(standalone: Client) -> None:
    owner = {SESSION_KEY: OWNER}
    first = await _add(standalone, "public", "Refunds", REFUNDS)
    await _add(standalone, "staff", "Handbook", HANDBOOK)

    _, everything = await call(standalone, "corpus_documents", meta=owner)
    _, staff = await call(standalone, "corpus_documents", meta=owner, corpus="staff")
    removed = await call(standalone, "corpus_remove", meta=owner, id=first)
    again = await call(standalone, "corpus_remove", meta=owner, id=first)
    _, after = await call(standalone, "corpus_search", query="refund")

    assert [(d["corpus"], d["title"], d["parts"]) for d in everything["documents"]] == [
        ("public", "Refunds", 1),
        ("staff", "Handbook", 1),
    ]
    assert (everything["total"], everything["truncated"]) == (2, False)
    assert [d["title"] for d in staff["documents"]] == ["Handbook"]
    assert removed == (False, {"removed": True, "parts": 1})
    assert again == (False, {"removed": False, "parts": 0})
    assert after == {"hits": [], "searched": ["public"]}  # its one part went with it


async def test_standalone_a_long_text_is_kept_in_parts_and_read_part_by_part(standalone: Client) -> None:
    paragraphs = [f"Paragraph {n} talks about topic{n}. " * 30 for n in range(12)]
    doc = await _add(standalone, "public", "Long", "\n\n".join(paragraphs))

    _, found = await call(standalone, "corpus_search", query="topic11")
    part = found["hits"][0]["part"]
    _, read = await call(standalone, "corpus_read", id=doc, part=part)
    beyond = await call(standalone, "corpus_read", id=doc, part=read["parts"] + 1)

    assert read["parts"] > 1
    assert "topic11" in read["text"] and len(read["text"]) <= 4000
    assert beyond[0] is True and beyond[1]["code"] == INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("tool", "args"),
    [
        ("corpus_search", {"query": ""}),
        ("corpus_search", {"query": "   "}),
        ("corpus_search", {"query": "x" * 501}),
        ("corpus_search", {"query": "refund", "limit": 0}),
        ("corpus_search", {"query": "refund", "limit": 21}),
        ("corpus_search", {"query": "refund", "corpus": "Not A Name"}),
        ("corpus_search", {}),
        ("corpus_read", {"id": "not-an-id"}),
        ("corpus_read", {"id": "0" * 32, "part": "one"}),
        ("corpus_list", {"corpus": "../etc"}),
    ],
)
async def test_standalone_bad_arguments_are_invalid_arguments(
    standalone: Client, tool: str, args: dict[str, Any]
) -> None:
    failed, answer = await call(standalone, tool, **args)
    assert (failed, answer["code"]) == (True, INVALID_ARGUMENTS)


@pytest.mark.parametrize("query", ['"', "!!! ---", "-", "or", "a:* & (b |", "\x00refund"])
async def test_standalone_odd_queries_answer_without_failing(standalone: Client, query: str) -> None:
    await _add(standalone, "public", "Refunds", REFUNDS)
    failed, answer = await call(standalone, "corpus_search", query=query)
    assert failed is False
    assert set(answer) == {"hits", "searched"}


@pytest.mark.parametrize(
    "args",
    [
        {"corpus": "Public", "title": "t", "text": "x"},
        {"corpus": "public", "title": "", "text": "x"},
        {"corpus": "public", "title": "two\nlines", "text": "x"},
        {"corpus": "public", "title": "t", "text": "   "},
        {"corpus": "public", "title": "t", "text": "x" * 200_001},
        {"corpus": "public", "title": "t", "text": "x", "url": "javascript:alert(1)"},
    ],
)
async def test_standalone_owner_add_refuses_bad_documents(standalone: Client, args: dict[str, Any]) -> None:
    failed, answer = await call(standalone, "corpus_add", meta={SESSION_KEY: OWNER}, **args)
    assert (failed, answer["code"]) == (True, INVALID_ARGUMENTS)


def test_split_text_cuts_at_breaks_and_keeps_every_word() -> None:
    split_text = _load_server().split_text
    text = ("word " * 900 + "\n\n") * 3
    parts = split_text(text, 4000)
    assert all(len(p) <= 4000 for p in parts)
    assert " ".join(parts).split() == text.split()
    assert split_text("x" * 9000, 4000) == ["x" * 4000, "x" * 4000, "x" * 1000]


# -- through the host ------------------------------------------------------------------------


@asynccontextmanager
async def owner_client(running: RunningHost) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {running.owner_token()}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        transport = streamable_http_client(f"{running.url}{OWNER_PATH}", http_client=http)
        async with Client(transport, cache=None) as client:
            yield client


async def invoke(owner: Client, tool: str, **arguments: Any) -> tuple[bool, Any]:
    return await call(owner, "capability_invoke", capability="corpus.retrieval", tool=tool, arguments=arguments)


async def session_of_role(running: RunningHost, owner: Client, role: str, corpora: list[str] | None) -> dict[str, Any]:
    config = {} if corpora is None else {"config": {"corpus.retrieval": {"corpora": corpora}}}
    failed, answer = await call(owner, "role_put", id=role, capabilities=["corpus.retrieval"], **config)
    assert not failed, answer
    _, created = await call(owner, "code_create", role=role)
    return await running.new_session({"code": created["code"]})


running = host_fixture([], name="running", builtin_dir=BUILTINS)


@needs_bwrap
async def test_owner_adds_lists_and_removes_through_the_owner_door(running: RunningHost) -> None:
    async with owner_client(running) as owner:
        added = await invoke(owner, "corpus.add", corpus="public", title="Refunds", text=REFUNDS, source="Help")
        await invoke(owner, "corpus.add", corpus="staff", title="Handbook", text=HANDBOOK)
        listed = await invoke(owner, "corpus.list")
        staff = await invoke(owner, "corpus.list", corpus="staff")
        removed = await invoke(owner, "corpus.remove", id=added[1]["id"])
        after = await invoke(owner, "corpus.list")
        bad = await invoke(owner, "corpus.add", corpus="Public!", title="x", text="y")
        undeclared = await invoke(owner, "corpus_add", corpus="public", title="x", text="y")

    assert added[0] is False
    assert (added[1]["corpus"], added[1]["title"], added[1]["parts"], added[1]["chars"]) == (
        "public",
        "Refunds",
        1,
        len(REFUNDS),
    )
    assert [(d["corpus"], d["title"], d.get("source")) for d in listed[1]["documents"]] == [
        ("public", "Refunds", "Help"),
        ("staff", "Handbook", None),
    ]
    assert [d["title"] for d in staff[1]["documents"]] == ["Handbook"]
    assert removed == (False, {"removed": True, "parts": 1})
    assert [d["title"] for d in after[1]["documents"]] == ["Handbook"]
    assert bad[0] is True and bad[1]["code"] == INVALID_ARGUMENTS  # the declared schema, before the child
    assert undeclared[0] is True and undeclared[1]["code"] == UNKNOWN


@needs_bwrap
async def test_visitors_search_and_read_only_the_corpora_of_their_role(running: RunningHost) -> None:
    async with owner_client(running) as owner:
        refunds = (await invoke(owner, "corpus.add", corpus="public", title="Refunds", text=REFUNDS))[1]["id"]
        await invoke(owner, "corpus.add", corpus="public", title="Shipping", text=SHIPPING)
        handbook = (await invoke(owner, "corpus.add", corpus="staff", title="Handbook", text=HANDBOOK))[1]["id"]
        staff_session = await session_of_role(running, owner, "staff", ["staff", "public"])
        closed_session = await session_of_role(running, owner, "closed", [])
    public_session = await running.new_session()

    async with running.client(public_session) as visitor:
        tools = sorted(t.name for t in (await visitor.list_tools()).tools if t.name.startswith("corpus_"))
        _, found = await call(visitor, "corpus_search", query="refund")
        _, read = await call(visitor, "corpus_read", id=refunds)
        hidden_doc = await call(visitor, "corpus_read", id=handbook)
        unknown_doc = await call(visitor, "corpus_read", id="f" * 32)
        hidden_corpus = await call(visitor, "corpus_search", query="refund", corpus="staff")
        hidden_list = await call(visitor, "corpus_list", corpus="staff")
        _, listed = await call(visitor, "corpus_list")
        owner_tool = await call(visitor, "corpus_add", corpus="public", title="x", text="y")
    async with running.client(staff_session) as staff:
        _, staff_found = await call(staff, "corpus_search", query="refund")
        _, staff_read = await call(staff, "corpus_read", id=handbook)
        _, staff_listed = await call(staff, "corpus_list")
    async with running.client(closed_session) as closed:
        _, closed_found = await call(closed, "corpus_search", query="refund")
        closed_read = await call(closed, "corpus_read", id=refunds)

    assert tools == VISITOR_TOOLS  # the owner tools are never listed to a visitor
    assert [(h["corpus"], h["title"]) for h in found["hits"]] == [("public", "Refunds"), ("public", "Shipping")]
    assert found["hits"][0]["rank"] > found["hits"][1]["rank"] > 0
    assert "**refund**" in found["hits"][1]["snippet"]
    assert (read["title"], read["text"]) == ("Refunds", REFUNDS)
    assert hidden_doc == unknown_doc == (True, {"code": NOT_FOUND, "message": "no document with this id"})
    assert hidden_corpus == hidden_list == (True, {"code": NOT_FOUND, "message": "no corpus named 'staff'"})
    assert [(c["name"], c["count"]) for c in listed["corpora"]] == [("public", 2)]
    assert owner_tool[0] is True and owner_tool[1]["code"] == UNKNOWN
    assert staff_found["searched"] == ["staff", "public"]
    assert {h["title"] for h in staff_found["hits"]} == {"Refunds", "Shipping", "Handbook"}
    assert staff_read["text"] == HANDBOOK
    assert [(c["name"], c["count"]) for c in staff_listed["corpora"]] == [("staff", 1), ("public", 2)]
    assert closed_found == {"hits": [], "searched": []}
    assert closed_read == hidden_doc


@needs_bwrap
async def test_bad_arguments_through_the_host_are_invalid_arguments(running: RunningHost) -> None:
    async with owner_client(running) as owner:
        await invoke(owner, "corpus.add", corpus="public", title="Refunds", text=REFUNDS)
    session = await running.new_session()
    async with running.client(session) as visitor:
        answers = [
            await call(visitor, "corpus_search", query=""),
            await call(visitor, "corpus_search", query="refund", limit=1000),
            await call(visitor, "corpus_search"),
            await call(visitor, "corpus_read", id="1; DROP TABLE records"),
        ]
        odd = [await call(visitor, "corpus_search", query=q) for q in ['"', "!!! ---", "-", "a:* & (b |", "\x00x"]]
    assert [(failed, answer["code"]) for failed, answer in answers] == [(True, INVALID_ARGUMENTS)] * 4
    assert odd == [(False, {"hits": [], "searched": ["public"]})] * 5  # no word in them, or none of these
