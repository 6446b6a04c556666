"""Standalone mode in process: the kit's in-memory emulation of the host ops."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from inline_snapshot import snapshot

from mcp_host_kit import (
    GRANT_KEY,
    SESSION_KEY,
    TEST_SESSION,
    Denied,
    Host,
    HostOpError,
    InvalidArguments,
    Kit,
    QuotaExhausted,
    Unavailable,
)
from mcp_host_kit.contract import json_contains
from mcp_host_kit.local import LocalHost
from mcp_host_kit.manifest import ManifestProblem, read_plugin_manifest
from tests.hosting import PLUGINS

pytestmark = pytest.mark.anyio

NOTES = PLUGINS / "notes"
ALL_OPS = "[store.insert, store.query, store.count, store.update, store.delete, store.claim, store.release, config.get]"


def session(owner_id: str = "owner-1", subject: dict[str, str] | None = None) -> dict[str, Any]:
    mode = subject["kind"] if subject else "public"
    return {"owner_id": owner_id, "session_id": "s1", "mode": mode, "subject": subject, "visitor": None, "role": "r"}


def plugin(folder: Path, body: str = "", host_ops: str = ALL_OPS) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    transport = f"transport: {{kind: stdio, command: python, args: [server.py], sandbox: {{host_ops: {host_ops}}}}}\n"
    (folder / "manifest.yaml").write_text(f"id: demo\nkind: capability\n{body}{transport}")
    return folder


def standalone(folder: Path, owner_id: str = "owner-1", subject: dict[str, str] | None = None) -> Host:
    return Kit(folder, environ={}).host({SESSION_KEY: session(owner_id, subject)})


@pytest.mark.parametrize(
    ("doc", "filter", "expected"),
    [
        ({"a": 1, "b": 2}, {"a": 1}, True),
        ({"a": 1}, {"a": 1, "b": 2}, False),
        ({"a": {"b": {"c": 1, "d": 2}}}, {"a": {"b": {"c": 1}}}, True),
        ({"tags": ["x", "y", "z"]}, {"tags": ["z", "x"]}, True),
        ({"tags": ["x"]}, {"tags": ["x", "q"]}, False),
        ({"tags": [{"k": 1, "v": 2}]}, {"tags": [{"k": 1}]}, True),
        ({"tags": "x"}, {"tags": ["x"]}, False),
        ({"n": 1}, {"n": 1.0}, True),
        ({"n": 1}, {"n": True}, False),
        ({"n": True}, {"n": True}, True),
        ({"n": None}, {"n": None}, True),
        ({}, {"n": None}, False),
        ({"n": "1"}, {"n": 1}, False),
        ({"a": {"b": 1}}, {"a": 1}, False),
        ({"a": 1}, {}, True),
    ],
)
def test_a_filter_matches_like_jsonb_containment(doc: Any, filter: Any, expected: bool) -> None:
    assert json_contains(doc, filter) is expected


async def test_store_ops_keep_insertion_order_filter_limit_and_stay_within_the_owner(tmp_path: Path) -> None:
    folder = plugin(tmp_path / "demo")
    kit = Kit(folder, environ={})
    host = kit.host({SESSION_KEY: session("owner-1")})
    ids = [await host.store.insert("notes", {"n": n, "even": n % 2 == 0}) for n in range(5)]

    def texts(records: list[Any]) -> list[int]:
        return [r.doc["n"] for r in records]

    assert texts(await host.store.query("notes")) == [0, 1, 2, 3, 4]
    assert texts(await host.store.query("notes", filter={"even": True}, limit=2)) == [0, 2]
    assert await host.store.count("notes", {"even": False}) == 2
    assert await host.store.update("notes", ids[1], {"n": 10, "even": True}) is True
    assert await host.store.update("notes", "0f8fad5b-d9cb-469f-a165-70867728950e", {"n": 0}) is False
    assert await host.store.delete("notes", filter={"even": True}) == 4
    assert await host.store.delete("notes", id=ids[3]) == 1  # matches the id, not the filter
    assert await host.store.delete("notes", id=ids[3], filter={"n": 3}) == 0
    assert texts(await host.store.query("notes")) == []
    await host.store.insert("notes", {"n": 99})

    other = kit.host({SESSION_KEY: session("owner-2")})
    assert (await other.store.count("notes"), await host.store.count("notes")) == (0, 1)


async def test_a_stored_document_is_a_copy_and_comes_back_with_its_id_and_time(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path / "demo"))
    doc: dict[str, Any] = {"text": "hi", "tags": ("a", "b")}
    record_id = await host.store.insert("notes", doc)
    doc["text"] = "changed after insert"
    [record] = await host.store.query("notes")
    record.doc["text"] = "changed after query"

    [again] = await host.store.query("notes")
    assert (again.id, again.doc) == (record_id, {"text": "hi", "tags": ["a", "b"]})
    assert again.created_at.tzinfo is not None


async def test_claims_have_one_holder_until_released_or_expired(tmp_path: Path) -> None:
    now = [1000.0]
    local = LocalHost(read_plugin_manifest(plugin(tmp_path / "demo")), clock=lambda: now[0])
    host = Host(local, grant=None, session=TEST_SESSION)

    outcomes = [
        await host.store.claim("slots", "10:00", 60),
        await host.store.claim("slots", "10:00", 60),
        await host.store.claim("slots", "11:00", 60),
        await host.store.release("slots", "10:00"),
        await host.store.release("slots", "10:00"),
        await host.store.claim("slots", "10:00", 5),
    ]
    now[0] += 5
    outcomes += [await host.store.claim("slots", "10:00", 5), await host.store.release("slots", "11:00")]
    now[0] += 60
    outcomes += [await host.store.release("slots", "10:00")]

    assert outcomes == [True, False, True, True, False, True, True, True, False]


async def test_an_op_the_manifest_does_not_name_is_denied(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path / "demo", host_ops="[store.query]"))
    assert await host.store.query("notes") == []
    with pytest.raises(Denied) as raised:
        await host.store.insert("notes", {"text": "hi"})

    assert raised.value.message.replace(str(tmp_path), "<tmp>") == snapshot(
        "store.insert is not named in transport.sandbox.host_ops of <tmp>/demo/manifest.yaml"
    )


async def test_an_op_this_kit_does_not_emulate_is_denied(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path / "demo", host_ops="[connector.invoke]"))
    with pytest.raises(Denied) as raised:
        await host.call("connector.invoke", {"category": "calendar", "verb": "freebusy", "args": {}})

    assert raised.value.message == snapshot("connector.invoke is not emulated in standalone mode")


async def test_arguments_are_checked_like_the_host_checks_them(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path / "demo"))
    deep: dict[str, Any] = {}
    for _ in range(32):
        deep = {"a": deep}
    messages = []
    for call in (
        host.store.insert("Notes", {}),
        host.store.insert("1notes", {}),
        host.store.count("n" * 65),
        host.store.claim("slots", "k", 0),
        host.store.claim("slots", "k", 301),
        host.store.query("notes", limit=0),
        host.store.query("notes", limit=501),
        host.store.delete("notes"),
        host.store.update("notes", "no-such-id", {}),
        host.store.claim("slots", "", 5),
        host.store.release("slots", "line\nbreak"),
        host.store.insert("notes", {"text": "x" * 256 * 1024}),
        host.store.count("notes", filter=deep),
        host.call("store.count", {"collection": "notes", "colour": "red"}),
        host.call("store.insert", {"collection": "notes", "doc": ["not", "an", "object"]}),
    ):
        with pytest.raises(InvalidArguments) as raised:
            await call
        messages.append(raised.value.message)

    assert messages == snapshot(
        [
            "collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter",
            "collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter",
            "collection must be 1-64 characters of a-z, 0-9 and _, starting with a letter",
            "store.claim: ttl_s: Input should be greater than or equal to 1",
            "ttl_s must be an integer from 1 to 300",
            "limit must be an integer from 1 to 500",
            "limit must be an integer from 1 to 500",
            "delete needs an id, a filter, or both",
            "id is not a record id (a UUID such as 0f8fad5b-d9cb-469f-a165-70867728950e)",
            "key must be 1-200 characters without control characters",
            "key must be 1-200 characters without control characters",
            "doc is larger than 262144 bytes of JSON",
            "filter is nested deeper than 32 levels",
            "store.count: colour: Extra inputs are not permitted",
            "store.insert: doc: Input should be a valid dictionary",
        ]
    )


async def test_the_quota_collection_is_stamped_with_the_subject_and_capped_by_its_default(tmp_path: Path) -> None:
    folder = plugin(
        tmp_path / "demo",
        "code_config: [{key: max_notes, type: int, default: 2}]\n"
        "quota: {config_key: max_notes, collection: notes, subject_field: subject_id}\n",
    )
    kit = Kit(folder, environ={})
    spring = kit.host({SESSION_KEY: session(subject={"kind": "code", "id": "SPRING"})})
    public = kit.host({SESSION_KEY: session()})
    key = kit.host({SESSION_KEY: session(subject={"kind": "api_key", "id": "k1"})})

    first = await spring.store.insert("notes", {"text": "one", "subject_id": "FORGED"})
    await spring.store.insert("notes", {"text": "two"})
    with pytest.raises(QuotaExhausted) as raised:
        await spring.store.insert("notes", {"text": "three"})
    await spring.store.update("notes", first, {"text": "one, edited", "subject_id": None})
    for n in range(3):
        await public.store.insert("notes", {"text": f"public {n}"})
        await key.store.insert("notes", {"text": f"key {n}"})  # key_config declares no limit
    await spring.store.insert("other", {"text": "not the quota collection"})

    assert raised.value.message == snapshot("the quota of 2 is used up")
    assert [r.doc for r in await spring.store.query("notes")] == snapshot(
        [
            {"text": "one, edited", "subject_id": "SPRING"},
            {"text": "two", "subject_id": "SPRING"},
            {"text": "public 0", "subject_id": None},
            {"text": "key 0", "subject_id": "k1"},
            {"text": "public 1", "subject_id": None},
            {"text": "key 1", "subject_id": "k1"},
            {"text": "public 2", "subject_id": None},
            {"text": "key 2", "subject_id": "k1"},
        ]
    )
    assert [r.doc for r in await spring.store.query("other")] == [{"text": "not the quota collection"}]


async def test_config_reads_the_manifests_defaults_per_scope(tmp_path: Path) -> None:
    folder = plugin(
        tmp_path / "demo",
        "config:\n"
        "  - {key: opens, type: time, default: 10:30}\n"
        "  - {key: words, type: string_list, default: [yes, no]}\n"
        "  - {key: note, type: string}\n"
        "role_config: [{key: tone, type: string, default: warm}]\n",
    )

    assert (await standalone(folder).config.get()).model_dump() == snapshot(
        {
            "config": {"opens": "10:30", "words": ["yes", "no"], "note": None},
            "code_config": {},
            "role_config": {"tone": "warm"},
            "key_config": {},
        }
    )
    assert (await standalone(NOTES).config.get()).model_dump() == snapshot(
        {
            "config": {"greeting": "hello", "page_size": 10},
            "code_config": {"max_notes": None},
            "role_config": {},
            "key_config": {"max_notes": None},
        }
    )


async def test_owner_meta_is_the_fixed_test_owner() -> None:
    host = standalone(NOTES)

    assert [await host.owner.meta(field) for field in ("name", "email", "timezone")] == snapshot(
        ["Test Owner", "owner@example.test", "UTC"]
    )


async def test_standalone_conversation_is_empty(tmp_path: Path) -> None:
    folder = plugin(tmp_path, host_ops="[conversation.read]")

    assert await standalone(folder).call("conversation.read", {}) == {"turns": []}


async def test_standalone_inference_checks_its_arguments_and_is_unavailable(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path, host_ops="[inference.generate]"))
    with pytest.raises(Unavailable) as unavailable:
        await host.inference.generate("Summarise this", max_tokens=100, system="Be brief.")
    with pytest.raises(InvalidArguments) as invalid:
        await host.inference.generate([{"role": "system", "content": "x"}])
    with pytest.raises(InvalidArguments) as empty:
        await host.inference.generate([])

    assert unavailable.value.message == snapshot(
        "inference.generate: standalone there is no visitor's client to write the text"
    )
    assert invalid.value.message == snapshot(
        "inference.generate: messages.0.role: Input should be 'user' or 'assistant'"
    )
    assert empty.value.message == snapshot(
        "inference.generate: messages: List should have at least 1 item after validation, not 0"
    )


async def test_a_call_without_session_is_the_test_session_and_standalone_is_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    kit = Kit(NOTES / "server.py", environ={})
    with caplog.at_level(logging.WARNING, logger="mcp_host_kit"):
        sessions = [kit.host(None).session, kit.host({}).session]

    assert kit.folder == NOTES and kit.standalone
    assert sessions == [TEST_SESSION, TEST_SESSION]
    assert TEST_SESSION.model_dump() == snapshot(
        {
            "owner_id": "test-owner",
            "session_id": "standalone",
            "mode": "public",
            "subject": None,
            "visitor": None,
            "role": "public",
        }
    )
    assert [r.getMessage() for r in caplog.records] == snapshot(
        ["MCP_HOST_SOCKET is not set: plugin 'notes' runs standalone; host ops are emulated in memory"]
    )


async def test_a_call_carrying_a_grant_is_not_emulated(tmp_path: Path) -> None:
    host = Kit(plugin(tmp_path / "demo"), environ={}).host({GRANT_KEY: "from-a-host", SESSION_KEY: session()})
    with pytest.raises(Unavailable) as raised:
        await host.store.count("notes")

    assert raised.value.message == snapshot(
        "store.count: this call carries a host's grant but MCP_HOST_SOCKET is not set"
    )


async def test_a_malformed_session_is_denied(tmp_path: Path) -> None:
    host = Kit(plugin(tmp_path / "demo"), environ={}).host({SESSION_KEY: {"owner_id": 7}})
    with pytest.raises(Denied):
        host.session  # noqa: B018
    with pytest.raises(Denied):
        await host.store.count("notes")


async def test_a_manifest_that_cannot_be_read_fails_the_first_call(tmp_path: Path) -> None:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "manifest.yaml").write_text("id: demo\nconfig: {key: not_a_list}\n")
    with pytest.raises(FileNotFoundError):
        Kit(tmp_path, environ={}).host(None)
    with pytest.raises(ManifestProblem) as raised:
        Kit(tmp_path / "broken", environ={}).host(None)

    assert str(raised.value).replace(str(tmp_path), "<tmp>") == snapshot(
        "<tmp>/broken/manifest.yaml: config must be a list of fields (run `mcp-host check` on the plugin folder)"
    )


async def test_every_refusal_is_a_host_op_error_with_its_code(tmp_path: Path) -> None:
    host = standalone(plugin(tmp_path / "demo", host_ops="[]"))
    with pytest.raises(HostOpError) as raised:
        await host.store.count("notes")

    assert raised.value.code == Denied.default_code


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("id: [unclosed\n", "not valid YAML"),
        ("- a list\n", "must be a mapping of manifest keys"),
        ("id: demo\ntransport: {sandbox: {host_ops: store.insert}}\n", "host_ops must be a list of strings"),
        ("id: demo\nconfig: [{label: no key}]\n", "config.0 must be a mapping with a key"),
        ("id: demo\ndescription: " + "x" * (1024 * 1024) + "\n", "larger than 1048576 bytes"),
    ],
)
def test_a_manifest_standalone_mode_cannot_emulate_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    (tmp_path / "manifest.yaml").write_text(text)
    with pytest.raises(ManifestProblem) as raised:
        read_plugin_manifest(tmp_path)

    assert problem in str(raised.value)


def test_an_incomplete_quota_is_not_emulated(tmp_path: Path) -> None:
    folder = plugin(tmp_path / "demo", "quota: {config_key: max_notes, collection: notes}\n")

    assert read_plugin_manifest(folder).quota is None


async def test_closing_a_standalone_kit_does_nothing() -> None:
    kit = Kit(NOTES, environ={})
    await kit.aclose()

    assert kit.standalone


SEARCH_OPS = "[store.insert, store.search]"


async def test_search_ranks_by_weighted_word_counts_within_the_filter_and_the_owner(tmp_path: Path) -> None:
    folder = plugin(tmp_path / "demo", host_ops=SEARCH_OPS)
    host, other = standalone(folder), standalone(folder, owner_id="owner-2")
    await host.store.insert("docs", {"title": "once", "text": "a refund", "corpus": "x"})
    await host.store.insert("docs", {"title": "refund", "text": "refund refund", "corpus": "x"})
    await host.store.insert("docs", {"title": "elsewhere", "text": "refund", "corpus": "y"})
    await other.store.insert("docs", {"title": "theirs", "text": "refund", "corpus": "x"})

    hits = await host.store.search("docs", "refund", fields=["title", "text"], filter={"corpus": "x"})
    phrase = await host.store.search("docs", '"a refund" -elsewhere')

    assert [(h.doc["title"], h.rank) for h in hits] == [("refund", 1.8), ("once", 0.4)]
    assert hits[1].snippet == "once … a **refund**"
    assert [h.doc["title"] for h in phrase] == ["once"]
    assert await host.store.search("docs", "!!! ---") == []


@pytest.mark.parametrize(
    "arguments",
    [
        {"collection": "docs", "query": ""},
        {"collection": "docs", "query": "   "},
        {"collection": "docs", "query": "x" * 1001},
        {"collection": "docs", "query": "a\x00b"},
        {"collection": "docs", "query": "x", "fields": []},
        {"collection": "docs", "query": "x", "fields": ["a", "a"]},
        {"collection": "docs", "query": "x", "limit": 101},
        {"collection": "docs", "query": "x", "colour": "red"},
    ],
)
async def test_search_arguments_are_checked_like_the_hosts(tmp_path: Path, arguments: dict[str, Any]) -> None:
    host = standalone(plugin(tmp_path / "demo", host_ops=SEARCH_OPS))
    with pytest.raises(InvalidArguments):
        await host.call("store.search", arguments)
