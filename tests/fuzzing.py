"""Hostile input for every inbound edge of a running host, seeded and reproducible.

Used by `tests/test_fuzz.py` (about a thousand inputs, in-process host) and `scripts/fuzz`
(ten thousand per endpoint against a `mcp-host serve` process). A case is one message
(bytes and headers) made by mutating a valid template in one *class* of docs/security.md §A;
`Fuzzer` sends cases to one endpoint and counts what came back. The host passes when no
answer is a 5xx, none is missing past its timeout, every JSON answer parses, and the host
still serves a normal session after each class (`serves_a_normal_session`).

Endpoints: `visitor-legacy` and `visitor-modern` (a session's MCP endpoint, 2025-11-25 with
an `Mcp-Session-Id` and 2026-07-28), `owner-legacy` and `owner-modern` (`/v1/owner/mcp`),
`rest` (`POST /v1/sessions` and the turns routes), `backchannel` (a plugin's host-op unix
socket, newline-delimited JSON-RPC, as a hostile child would write it) and `egress` (a
sandboxed child's egress gate, the unix socket the host's egress proxy serves it: HTTP proxy
heads and SOCKS5 greetings mutated by `tests.egress.hostile_heads`, in the classes
`EGRESS_CLASSES`). An egress answer must be one of the proxy's own in one line (its 502 for an
unreachable destination is no fault), and after each class the host must also still serve the
child through the same gate (`still_reaches`).
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import anyio
import httpx2

from tests.egress import hostile_heads

__all__ = [
    "CLASSES",
    "EGRESS_CLASSES",
    "ENDPOINTS",
    "Case",
    "EgressTarget",
    "Fuzzer",
    "Report",
    "Target",
    "cases",
    "egress_target",
    "serves_a_normal_session",
    "still_reaches",
]

LEGACY = "2025-11-25"
MODERN = "2026-07-28"

CLASSES = (
    "invalid_json",
    "wrong_types",
    "huge_numbers",
    "deep_nesting",
    "batches",
    "invalid_utf8",
    "lone_surrogates",
    "controls",
    "duplicate_keys",
    "shape",
    "headers",
    "forged_meta",
)
ENDPOINTS = (
    "visitor-legacy",
    "visitor-modern",
    "oneurl-legacy",
    "oneurl-modern",
    "owner-legacy",
    "owner-modern",
    "rest",
    "oauth",
    "backchannel",
    "egress",
)
EGRESS_CLASSES = (*hostile_heads.KINDS, "mixed")
"""The `egress` endpoint's classes: one kind of mutation each (`hostile_heads.KINDS`), and all
of them mixed."""


# -- JSON with the things json.dumps will not write ----------------------------------------


@dataclass(frozen=True)
class Raw:
    """JSON text written as is (a 5000-digit number, `NaN`, deep nesting)."""

    text: str


@dataclass(frozen=True)
class Dup:
    """An object written with its (key, value) pairs as given: duplicate keys allowed."""

    pairs: tuple[tuple[str, Any], ...]


def emit(value: Any) -> str:
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, Dup):
        return "{" + ",".join(f"{json.dumps(k)}:{emit(v)}" for k, v in value.pairs) + "}"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{emit(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(emit(v) for v in value) + "]"
    return json.dumps(value)  # ensure_ascii: a lone surrogate is written as its \u escape


# -- templates: one valid message per method an endpoint serves ----------------------------


def _client_meta() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "1"},
        "io.modelcontextprotocol/clientCapabilities": {},
    }


_VISITOR_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("ping", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "echo", "arguments": {"text": "hello"}}),
    ("tools/call", {"name": "whoami", "arguments": {}}),
    ("tools/call", {"name": "note_add", "arguments": {"text": "a note"}}),
    ("tools/call", {"name": "note_list", "arguments": {}}),
    ("prompts/list", {}),
    ("prompts/get", {"name": "greet", "arguments": {"who": "x"}}),
    ("resources/list", {}),
    ("resources/read", {"uri": "test://static-text"}),
    ("resources/templates/list", {}),
    (
        "completion/complete",
        {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {"name": "who", "value": "a"}},
    ),
    ("logging/setLevel", {"level": "info"}),
    # MCP tasks (2025-11-25; a 2026-07-28 session answers method not found): a task-augmented
    # call, and the task methods with an id this session never made.
    ("tools/call", {"name": "echo", "arguments": {"text": "hello"}, "task": {"ttl": 60000}}),
    ("tasks/list", {}),
    ("tasks/get", {"taskId": "task-1"}),
    ("tasks/result", {"taskId": "task-1"}),
    ("tasks/cancel", {"taskId": "task-1"}),
]
_OWNER_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("ping", {}),
    ("tools/list", {}),
    ("tools/call", {"name": "capabilities_list", "arguments": {}}),
    (
        "tools/call",
        {
            "name": "capability_invoke",
            "arguments": {"capability": "notes", "tool": "notes.add", "arguments": {"text": "t"}},
        },
    ),
    ("tools/call", {"name": "config_get", "arguments": {"capability": "notes", "scope": "owner"}}),
    (
        "tools/call",
        {"name": "config_set", "arguments": {"capability": "notes", "scope": "owner", "values": {"greeting": "hi"}}},
    ),
    ("tools/call", {"name": "roles_list", "arguments": {}}),
    ("tools/call", {"name": "audit_list", "arguments": {"limit": 5}}),
    ("tools/call", {"name": "tools_pending", "arguments": {}}),
    ("tools/call", {"name": "holds_list", "arguments": {}}),
    ("tools/call", {"name": "connectors_list", "arguments": {}}),
]
_BACKCHANNEL_CALLS: list[tuple[str, dict[str, Any]]] = [
    ("ping", {}),
    ("tools/list", {}),
    (
        "tools/call",
        {
            "name": "store.insert",
            "arguments": {"collection": "notes", "doc": {"text": "x"}},
            "_meta": {"mcp-host/grant": "not-a-grant"},
        },
    ),
    (
        "tools/call",
        {
            "name": "store.query",
            "arguments": {"collection": "notes", "filter": {"a": 1}},
            "_meta": {"mcp-host/grant": "g"},
        },
    ),
    ("tools/call", {"name": "config.get", "arguments": {}}),
]
_NOTIFICATIONS: list[tuple[str, dict[str, Any]]] = [
    ("notifications/initialized", {}),
    ("notifications/cancelled", {"requestId": 99, "reason": "fuzz"}),
    ("notifications/progress", {"progressToken": "t", "progress": 1}),
]


@dataclass
class Case:
    endpoint: str
    cls: str
    body: bytes
    headers: list[tuple[str, str]] = field(default_factory=list)
    path: str = ""
    """For `rest`: which route (`sessions`, `turns`, `answer`); for `oauth`, which of its routes
    (`register`, `token`, `revoke`, `authorize`, `desk`)."""


def _message(rng: random.Random, endpoint: str) -> dict[str, Any]:
    table = {
        "visitor": _VISITOR_CALLS,
        "oneurl": _VISITOR_CALLS,
        "owner": _OWNER_CALLS,
        "backchannel": _BACKCHANNEL_CALLS,
    }[endpoint.split("-")[0]]
    if rng.random() < 0.15:
        method, params = rng.choice(_NOTIFICATIONS)
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": json.loads(json.dumps(params))}
    else:
        method, params = rng.choice(table)
        message = {"jsonrpc": "2.0", "id": rng.randrange(1, 10**6), "method": method}
        message["params"] = json.loads(json.dumps(params))
    if endpoint.endswith("modern"):
        message.setdefault("params", {})
        message["params"]["_meta"] = {**message["params"].get("_meta", {}), **_client_meta()}
    return message


def _rest_body(rng: random.Random) -> tuple[str, dict[str, Any]]:
    route = rng.choice(["sessions", "sessions", "turns", "answer"])
    if route == "sessions":
        return route, {"visitor": {"name": "Ada", "email": "ada@example.org"}}
    if route == "turns":
        return route, {"message": "hello there"}
    return route, {"text": "I've done it"}


_OAUTH_CALLBACK = "http://127.0.0.1:5173/callback"
_OAUTH_MESSAGES: dict[str, dict[str, Any]] = {
    "register": {"redirect_uris": [_OAUTH_CALLBACK], "client_name": "fuzz", "token_endpoint_auth_method": "none"},
    "token": {
        "grant_type": "authorization_code",
        "code": "c0de",
        "client_id": "fuzz",
        "code_verifier": "v" * 43,
        "redirect_uri": _OAUTH_CALLBACK,
        "resource": "http://127.0.0.1/mcp",
    },
    "revoke": {"token": "t0ken", "client_id": "fuzz"},
    "authorize": {
        "response_type": "code",
        "client_id": "fuzz",
        "redirect_uri": _OAUTH_CALLBACK,
        "code_challenge": "c" * 43,
        "code_challenge_method": "S256",
        "state": "s",
        "resource": "http://127.0.0.1/mcp",
    },
    "desk": {"request": "r3quest", "decision": "allow", "name": "Ada", "email": "a@b.c", "code": "c0de"},
}


def _oauth_case(rng: random.Random, cls: str) -> Case:
    """A hostile body for one of the OAuth routes: JSON for `/register`, else a form made of the
    mutated message when it is still a flat object (the form parsers see hostile values), else
    the mutated bytes as they are."""
    route = rng.choice(sorted(_OAUTH_MESSAGES))
    body, headers = _mutate(rng, cls, json.loads(json.dumps(_OAUTH_MESSAGES[route])))
    json_type = [("Content-Type", "application/json")]
    if route == "register":
        return Case("oauth", cls, body, headers or json_type, route)
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):  # not JSON, or nested past the parser's depth
        parsed = None
    if isinstance(parsed, dict) and all(isinstance(v, str | int | float) for v in parsed.values()):
        # A lone surrogate becomes bytes that are no UTF-8 (`%ED%B8%80`): hostile to the form parser too.
        form = urlencode({str(k): str(v) for k, v in parsed.items()}, errors="surrogatepass").encode()
        return Case("oauth", cls, form, [("Content-Type", "application/x-www-form-urlencoded")], route)
    return Case("oauth", cls, body, headers or [("Content-Type", "application/x-www-form-urlencoded")], route)


def _headers(endpoint: str, message: Any) -> list[tuple[str, str]]:
    headers = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")]
    if endpoint.endswith("modern") and isinstance(message, dict):
        headers.append(("MCP-Protocol-Version", MODERN))
        method = message.get("method")
        if isinstance(method, str) and method.isascii():
            headers.append(("Mcp-Method", method))
        name = (message.get("params") or {}).get("name") if isinstance(message.get("params"), dict) else None
        if isinstance(name, str) and name.isascii():
            headers.append(("Mcp-Name", name))
    elif endpoint.endswith("legacy"):
        headers.append(("MCP-Protocol-Version", LEGACY))
    return headers


# -- mutations: one per class --------------------------------------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every path to a node (the root included)."""
    yield prefix
    if isinstance(value, dict):
        for k, v in value.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from _paths(v, (*prefix, i))


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {k: (_replace(v, rest, new) if k == head else v) for k, v in value.items()}
    return [(_replace(v, rest, new) if i == head else v) for i, v in enumerate(value)]


def _string_paths(value: Any) -> list[tuple[tuple[Any, ...], bool]]:
    """(path, is_key) for every string value and every key."""
    found: list[tuple[tuple[Any, ...], bool]] = []
    for path in _paths(value):
        node = _get(value, path)
        if isinstance(node, str):
            found.append((path, False))
        if path:
            found.append((path, True))
    return found


def _get(value: Any, path: tuple[Any, ...]) -> Any:
    for part in path:
        value = value[part]
    return value


def _rename_key(value: Any, path: tuple[Any, ...], new_key: str) -> Any:
    parent_path, key = path[:-1], path[-1]
    parent = _get(value, parent_path)
    if isinstance(parent, dict):
        renamed = {(new_key if k == key else k): v for k, v in parent.items()}
        return _replace(value, parent_path, renamed)
    return value


def _pick_node(rng: random.Random, message: Any) -> tuple[Any, ...]:
    paths = list(_paths(message))
    return rng.choice(paths[1:] or paths)


_WRONG = [None, True, False, 0, -1, 1.5, "", "x", [], {}, [1, "a"], {"a": {"b": None}}]
_NUMBERS = [
    "9" * 5000,
    "-" + "9" * 400,
    "1e400",
    "-1e400",
    "NaN",
    "Infinity",
    "-Infinity",
    "-0",
    "18446744073709551616",
    "1.0e-400",
    "0.1e1",
    "2e308",
]
_SURROGATES = ["\ud800", "\udc00", "\udbff", "\udfff", "a\ud83d", "\ude00b"]
_CONTROLS = ["\x00", "a\x00b", "\x1b[31m", "\x07", "\u202e", "\ufeff", "\u200b", "\U000e0041", "\r\n", "\x7f"]
_BAD_UTF8 = [b"\xff", b"\xc0\xaf", b"\xed\xa0\x80", b"\xe2\x82", b"\xf4\x90\x80\x80", b"\x80", b"\xfe\xfe"]
_FORGED_KEYS = [
    "mcp-host/session",
    "mcp-host/grant",
    "mcp-host/call",
    "mcp-host/quota",
    "MCP-Host/session",
    "mcp\u2010host/session",
    "ｍｃｐ-host/session",
    "mcp-\u200bhost/session",
    "io.modelcontextprotocol/related-task",
    "io.modelcontextprotocol/protocolVersion",
]


def _mutate(rng: random.Random, cls: str, message: Any) -> tuple[bytes, list[tuple[str, str]] | None]:
    """The hostile body of class `cls` made from `message`, and headers when the class sets them."""
    if cls == "invalid_json":
        text = emit(message).encode()
        choice = rng.randrange(7)
        if choice == 0:
            return text[: rng.randrange(0, max(1, len(text)))], None
        if choice == 1:
            return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 64))), None
        if choice == 2:
            return text + rng.choice([b"}", b"]", b",", b" x", b"\x00"]), None
        if choice == 3:
            return rng.choice(
                [b"", b" ", b"null", b'"text"', b"1", b"true", b"{", b"[", b"{}", b"\xef\xbb\xbf{}"]
            ), None
        if choice == 4:
            return text.replace(b":", b"=", 1), None
        if choice == 5:
            return text.replace(b'"', b"'"), None
        return b"{" * rng.randrange(1, 40), None
    if cls == "wrong_types":
        return emit(_replace(message, _pick_node(rng, message), rng.choice(_WRONG))).encode(), None
    if cls == "huge_numbers":
        target = rng.choice([("id",), *[p for p in _paths(message) if p][:20]])
        try:
            return emit(_replace(message, target, Raw(rng.choice(_NUMBERS)))).encode(), None
        except (KeyError, IndexError, TypeError):
            return emit({**message, "id": Raw(rng.choice(_NUMBERS))}).encode(), None
    if cls == "deep_nesting":
        depth = rng.choice([64, 200, 1000, 5000, 100_000])
        opener, closer = rng.choice([("[", "]"), ('{"a":', "}")])
        nested = Raw(opener * depth + "1" + closer * depth)
        return emit(_replace(message, _pick_node(rng, message), nested)).encode(), None
    if cls == "batches":
        n = rng.randrange(0, 4)
        return emit([message] * n if rng.random() < 0.7 else [message, 1, "x", []][: n + 1]).encode(), None
    if cls == "invalid_utf8":
        spots = [p for p, is_key in _string_paths(message) if not is_key] or [()]
        path = rng.choice(spots)
        marked = _replace(message, path, "\u0001MARK\u0001") if path else message
        text = emit(marked).encode()
        return text.replace(b"\\u0001MARK\\u0001", rng.choice(_BAD_UTF8)), None
    if cls == "lone_surrogates":
        spots = _string_paths(message)
        if not spots:
            return emit(message).encode(), None
        # Half the time in what a tool, prompt or op is handed: that is what travels furthest.
        payload = [(p, k) for p, k in spots if not k and len(p) > 2 and p[:2] == ("params", "arguments")]
        path, is_key = rng.choice(payload if payload and rng.random() < 0.5 else spots)
        bad = rng.choice(_SURROGATES)
        if is_key:
            return emit(_rename_key(message, path, str(path[-1]) + bad)).encode(), None
        node = _get(message, path)
        cut = rng.randrange(0, len(node) + 1)
        return emit(_replace(message, path, node[:cut] + bad + node[cut:])).encode(), None
    if cls == "controls":  # valid Unicode that PostgreSQL, a log line or a terminal may choke on
        spots = _string_paths(message)
        if not spots:
            return emit(message).encode(), None
        path, is_key = rng.choice(spots)
        bad = rng.choice(_CONTROLS)
        if is_key:
            return emit(_rename_key(message, path, str(path[-1]) + bad)).encode(), None
        return emit(_replace(message, path, _get(message, path) + bad)).encode(), None
    if cls == "duplicate_keys":
        dicts = [p for p in _paths(message) if isinstance(_get(message, p), dict) and _get(message, p)]
        path = rng.choice(dicts)
        obj = _get(message, path)
        key = rng.choice(list(obj))
        pairs = [*obj.items(), (key, rng.choice(_WRONG + ["other", "forbidden"]))]
        if rng.random() < 0.5:
            pairs.reverse()
        return emit(_replace(message, path, Dup(tuple(pairs)))).encode(), None
    if cls == "shape":
        return _shape(rng, message), None
    if cls == "headers":
        return _header_games(rng, message)
    if cls == "forged_meta":
        return _forged(rng, message), None
    raise ValueError(cls)


def _shape(rng: random.Random, message: dict[str, Any]) -> bytes:
    m = dict(message)
    choice = rng.randrange(9)
    if choice == 0:
        m.pop(rng.choice(list(m)), None)
    elif choice == 1:
        m["id"] = rng.choice([{"a": 1}, [1], 1.5, None, True, "", "x" * 5000])
    elif choice == 2:
        m["jsonrpc"] = rng.choice(["1.0", "2", 2.0, None, ""])
    elif choice == 3:
        m = {"jsonrpc": "2.0", "id": m.get("id", 1), "result": {"content": []}}
    elif choice == 4:
        m = {"jsonrpc": "2.0", "id": m.get("id", 1), "error": {"code": -1, "message": "x"}}
    elif choice == 5:
        m["method"] = rng.choice(
            ["", "unknown/method", "tools/CALL", "rpc.discover", "$/cancel", "x" * 300, "initialize"]
        )
    elif choice == 6:
        m["params"] = rng.choice([[], "params", 1, None, [m.get("params")]])
    elif choice == 7:
        m["extra"] = {"unexpected": True}
    else:
        m["id"] = rng.randrange(-(2**70), 2**70)
    return emit(m).encode()


def _header_games(rng: random.Random, message: dict[str, Any]) -> tuple[bytes, list[tuple[str, str]]]:
    body = emit(message).encode()
    headers = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json")]
    choice = rng.randrange(8)
    if choice == 0:
        headers += [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/list")]
    elif choice == 1:
        headers += [
            ("MCP-Protocol-Version", MODERN),
            ("Mcp-Method", str(message.get("method"))),
            ("Mcp-Name", "forbidden"),
        ]
    elif choice == 2:
        headers += [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "a"), ("Mcp-Method", "b")]
    elif choice == 3:
        headers += [("MCP-Protocol-Version", rng.choice(["1999-01-01", "", "2026-07-28, 2025-11-25", "é", "x" * 300]))]
    elif choice == 4:
        headers = [
            ("Content-Type", rng.choice(["text/plain", "application/xml", "", "application/json; charset=latin-1"]))
        ]
    elif choice == 5:
        headers = [("Accept", rng.choice(["text/html", "", "*/*"])), ("Content-Type", "application/json")]
    elif choice == 6:
        headers += [("Mcp-Session-Id", rng.choice(["", "nope", "x" * 500, "../../etc"]))]
    else:
        headers += [("MCP-Protocol-Version", MODERN), ("Mcp-Method", "tools/call"), ("Mcp-Name", "\u00e9cho\u00ff")]
    return body, headers


def _forged(rng: random.Random, message: dict[str, Any]) -> bytes:
    m = json.loads(json.dumps(message))
    params = m.setdefault("params", {})
    if not isinstance(params, dict):
        params = m["params"] = {}
    forged: dict[str, Any] = {}
    for _ in range(rng.randrange(1, 5)):
        forged[rng.choice(_FORGED_KEYS)] = rng.choice(
            [{"owner_id": "someone", "mode": "owner", "session_id": "x"}, "token", {"limit": 999}, None]
        )
    if rng.random() < 0.2:  # over the caps: many keys, deep, large
        forged.update({f"k{i}": i for i in range(rng.choice([20, 200]))})
    if rng.random() < 0.2:
        forged["big"] = "x" * rng.choice([5000, 100_000])
    where = rng.choice(["_meta", "arguments"])
    if where == "arguments" and isinstance(params.get("arguments"), dict):
        params["arguments"]["_meta"] = forged
        params["arguments"].update(forged)
    else:
        params["_meta"] = {**params.get("_meta", {}), **forged}
    return emit(m).encode()


def cases(endpoint: str, n: int, seed: int, *, egress_port: int = 80) -> Iterator[Case]:
    """`n` cases for `endpoint`, the classes taken in turn; the same seed gives the same cases.
    `egress_port`: where the `egress` cases ask to go (the port the gate's policy allows)."""
    rng = random.Random(f"{seed}:{endpoint}")
    if endpoint == "egress":
        yield from _egress_cases(rng, n, egress_port)
        return
    for i in range(n):
        cls = CLASSES[i % len(CLASSES)]
        if endpoint == "oauth":
            yield _oauth_case(rng, cls)
            continue
        if endpoint == "rest":
            route, message = _rest_body(rng)
            body, headers = _mutate(rng, cls, message)
            yield Case(endpoint, cls, body, headers or [("Content-Type", "application/json")], route)
            continue
        message = _message(rng, endpoint)
        body, headers = _mutate(rng, cls, message)
        yield Case(endpoint, cls, body, headers if headers is not None else _headers(endpoint, message))


def _egress_cases(rng: random.Random, n: int, port: int) -> Iterator[Case]:
    requests = hostile_heads.templates(port)
    for i in range(n):
        cls = EGRESS_CLASSES[i % len(EGRESS_CLASSES)]
        kinds: Sequence[str] = hostile_heads.KINDS if cls == "mixed" else (cls,)
        yield Case("egress", cls, hostile_heads.mutated(rng.choice(requests), rng, kinds))


# -- sending ---------------------------------------------------------------------------------


@dataclass
class Target:
    """Where a running host listens, and the credentials the fuzzer uses."""

    url: str
    owner_token: str
    session: dict[str, Any]
    """A visitor session (`POST /v1/sessions` answer) the fuzzer sends to."""
    socket: Path | None
    """A plugin's host-op socket (host path), for the back-channel endpoint."""
    egress: EgressTarget | None = None
    """A sandboxed child's egress gate, for the `egress` endpoint."""


@dataclass(frozen=True)
class EgressTarget:
    """A running child's egress gate, and how to see that the child still reaches its allowed
    destination through it."""

    gate: Path
    """The gate's unix socket (host path)."""
    port: int
    """A port on `site.example.test` the gate's policy allows, an echo server's there: where the
    cases ask to go (the host resolves the name to 127.0.0.1 from its egress hosts file)."""
    plugin_id: str
    gates: Callable[[], Sequence[Path]]
    """The plugin's open gates now (`gate` among them while the same child runs: a child's
    start opens a new gate, its end closes it)."""
    tool: str
    """The child's visitor tool that fetches `{"url": …}` through its egress."""
    url: str
    """An allowed http url the tool fetches after each class."""
    says: str
    """What that page answers."""


@dataclass
class Report:
    sent: Counter[str] = field(default_factory=Counter)
    statuses: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    hangs: list[str] = field(default_factory=list)
    malformed: list[str] = field(default_factory=list)
    health_failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not (self.server_errors or self.hangs or self.malformed or self.health_failures)

    def summary(self) -> dict[str, Any]:
        return {
            "sent": sum(self.sent.values()),
            "by_endpoint": dict(self.sent),
            "statuses": dict(sorted(self.statuses.items())),
            "5xx": len(self.server_errors),
            "hangs": len(self.hangs),
            "malformed": len(self.malformed),
            "health_failures": len(self.health_failures),
            "seconds": round(self.seconds, 1),
            "examples": (self.server_errors + self.hangs + self.malformed + self.health_failures)[:5],
        }


HealthCheck = Callable[[], Awaitable[str | None]]


class Fuzzer:
    """Sends cases to a running host; after each class, checks that it still serves."""

    def __init__(self, target: Target, *, timeout_s: float = 20.0, concurrency: int = 4) -> None:
        self.target = target
        self.timeout_s = timeout_s
        self.concurrency = concurrency
        self.report = Report()
        self._http = httpx2.AsyncClient(timeout=httpx2.Timeout(timeout_s))
        self._legacy: dict[str, str] = {}
        self._legacy_lock = anyio.Lock()

    async def aclose(self) -> None:
        await self._http.aclose()

    async def run(self, endpoint: str, n: int, seed: int, health: HealthCheck) -> None:
        started = time.monotonic()
        by_class: dict[str, list[Case]] = {}
        port = self.target.egress.port if self.target.egress is not None else 80
        for case in cases(endpoint, n, seed, egress_port=port):
            by_class.setdefault(case.cls, []).append(case)
        limiter = anyio.CapacityLimiter(self.concurrency)

        async def one(case: Case) -> None:
            async with limiter:
                await self._send(case)

        for cls, batch in by_class.items():
            async with anyio.create_task_group() as tg:
                for case in batch:
                    tg.start_soon(one, case)
            problem = await health()
            if problem is not None:
                self.report.health_failures.append(f"{endpoint}/{cls}: {problem}")
        self.report.seconds += time.monotonic() - started

    async def _send(self, case: Case) -> None:
        self.report.sent[case.endpoint] += 1
        label = f"{case.endpoint}/{case.cls}: {case.body[:120]!r}"
        try:
            with anyio.fail_after(self.timeout_s + 5):
                if case.endpoint == "backchannel":
                    status, text, content_type = await self._socket(case)
                elif case.endpoint == "egress":
                    status, text, content_type = await self._gate(case)
                else:
                    status, text, content_type = await self._post(case)
        except (TimeoutError, httpx2.TimeoutException):
            self.report.hangs.append(label)
            return
        except (httpx2.TransportError, OSError) as exc:
            self.report.server_errors.append(f"{label} -> connection failed: {type(exc).__name__}")
            return
        self.report.statuses[f"{case.endpoint} {status}"] += 1
        if status >= 500 and not (case.endpoint == "egress" and status == 502):  # the proxy's "unreachable"
            self.report.server_errors.append(f"{label} -> {status} {text[:200]}")
        elif not _well_formed(text, content_type):
            self.report.malformed.append(f"{label} -> {status} {text[:200]!r}")

    async def _post(self, case: Case) -> tuple[int, str, str]:
        t = self.target
        headers = list(case.headers)
        if case.endpoint == "rest":
            url, headers = self._rest_route(case, headers)
        elif case.endpoint == "oauth":
            url = f"{t.url}/oauth/desk" if case.path == "desk" else f"{t.url}/{case.path}"
        elif case.endpoint.startswith("oneurl"):  # the one visitor URL, with the session's own token
            url = f"{t.url}/mcp"
            headers.append(("Authorization", f"Bearer {t.session['token']}"))
        elif case.endpoint.startswith("owner"):
            url = f"{t.url}/v1/owner/mcp"
            headers.append(("Authorization", f"Bearer {t.owner_token}"))
        else:
            url = t.session["mcp_url"]
            headers.append(("Authorization", f"Bearer {t.session['token']}"))
        if case.endpoint.endswith("legacy") and not any(k.lower() == "mcp-session-id" for k, _ in headers):
            headers.append(("Mcp-Session-Id", await self._protocol_session(case.endpoint, url, headers)))
        raw = [(k.encode(), v.encode("latin-1")) for k, v in headers]  # header bytes as a hostile client sends them
        response = await self._http.post(url, content=case.body, headers=raw)
        return response.status_code, response.text, response.headers.get("content-type", "")

    def _rest_route(self, case: Case, headers: list[tuple[str, str]]) -> tuple[str, list[tuple[str, str]]]:
        t = self.target
        base = f"{t.url}/v1/sessions"
        if case.path == "sessions":
            return base, headers
        auth = [*headers, ("Authorization", f"Bearer {t.session['token']}")]
        if case.path == "turns":
            return f"{base}/{t.session['session_id']}/turns", auth
        return f"{base}/{t.session['session_id']}/turns/1/answer", auth

    async def _protocol_session(self, endpoint: str, url: str, headers: list[tuple[str, str]]) -> str:
        """A 2025-11-25 `Mcp-Session-Id` for this endpoint, opened once and reused."""
        async with self._legacy_lock:
            known = self._legacy.get(endpoint)
            if known is None:
                known = self._legacy[endpoint] = await self._initialize(url, headers)
            return known

    async def _initialize(self, url: str, headers: list[tuple[str, str]]) -> str:
        init = {
            "jsonrpc": "2.0",
            "id": 0,
            "method": "initialize",
            "params": {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "fuzz", "version": "1"}},
        }
        auth = [h for h in headers if h[0] == "Authorization"]
        base = [("Accept", "application/json, text/event-stream"), ("Content-Type", "application/json"), *auth]
        opened = await self._http.post(url, json=init, headers=base)
        sid = opened.headers["mcp-session-id"]
        note = {"jsonrpc": "2.0", "method": "notifications/initialized"}
        await self._http.post(
            url, json=note, headers=[*base, ("Mcp-Session-Id", sid), ("MCP-Protocol-Version", LEGACY)]
        )
        return str(sid)

    async def _socket(self, case: Case) -> tuple[int, str, str]:
        """Write the case as one line on a fresh connection after an initialize; read until a ping answers.

        200 when the connection still answers a ping after the case, 499 when the host closed
        it (a refusal of a message over the cap, say) — both fine; a ping left unanswered
        is a hang.
        """
        assert self.target.socket is not None
        async with await anyio.connect_unix(self.target.socket) as stream:
            init = {
                "jsonrpc": "2.0",
                "id": "init",
                "method": "initialize",
                "params": {
                    "protocolVersion": LEGACY,
                    "capabilities": {},
                    "clientInfo": {"name": "fuzz", "version": "1"},
                },
            }
            ping = {"jsonrpc": "2.0", "id": "after", "method": "ping"}
            line = case.body.replace(b"\n", b" ")
            await stream.send(
                json.dumps(init).encode()
                + b"\n"
                + b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n'
                + line
                + b"\n"
                + json.dumps(ping).encode()
                + b"\n"
            )
            received = b""
            while b'"after"' not in received:
                try:
                    received += await stream.receive()
                except (anyio.EndOfStream, anyio.BrokenResourceError, ConnectionResetError):
                    return 499, received.decode("utf-8", "replace"), "application/x-ndjson"
            return 200, received.decode("utf-8", "replace"), "application/x-ndjson"

    async def _gate(self, case: Case) -> tuple[int, str, str]:
        """Send the case on a connection of its own to the child's gate; the status its answer
        amounts to (`hostile_heads.status_of`), and the answer, its bytes kept (latin-1)."""
        assert self.target.egress is not None
        answer = await hostile_heads.exchange(self.target.egress.gate, case.body)
        return hostile_heads.status_of(answer), answer.decode("latin-1"), _EGRESS_ANSWER


_EGRESS_ANSWER = "application/x-egress-proxy"  # what `_gate` calls an answer of the proxy's


def _well_formed(text: str, content_type: str) -> bool:
    """Every JSON answer parses: a body, each SSE event's data, each socket line; an egress
    proxy's answer is one of its own (`hostile_heads.well_formed`)."""
    if content_type == _EGRESS_ANSWER:
        return hostile_heads.well_formed(text.encode("latin-1"))
    try:
        if content_type.startswith("application/json"):
            if text.strip():
                json.loads(text)
        elif content_type.startswith("text/event-stream"):
            for line in text.splitlines():
                if line.startswith("data:") and line[5:].strip():
                    json.loads(line[5:])
        elif content_type == "application/x-ndjson":
            for line in text.splitlines():
                if line.strip():
                    json.loads(line)
    except ValueError:
        return False
    return True


async def serves_a_normal_session(url: str) -> str | None:
    """None when `/healthz` is 200 and a fresh public session lists tools and calls `echo`."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(20)) as http:
        health = await http.get(f"{url}/healthz")
        if health.status_code != 200:
            return f"/healthz {health.status_code}"
        return await _call_in_a_new_session(http, url, "echo", {"text": "ok"}, '"ok"')


async def still_reaches(url: str, egress: EgressTarget) -> str | None:
    """None when the host serves a normal session, the child's gate is still open (the child was
    not restarted: a new start opens a new gate) and a fresh public session's call of its fetch
    tool gets the allowed page (through that gate: the plugin's child is shared)."""
    problem = await serves_a_normal_session(url)
    if problem is not None:
        return problem
    gates = list(egress.gates())
    if egress.gate not in gates:
        return f"{egress.plugin_id}'s gates are {gates}, without its child's {egress.gate}"
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(30)) as http:
        return await _call_in_a_new_session(http, url, egress.tool, {"url": egress.url}, egress.says)


async def egress_target(
    url: str, plugin_id: str, gates: Callable[[], Sequence[Path]], *, port: int, tool: str, fetch: str, says: str
) -> EgressTarget:
    """The `egress` endpoint's target: `plugin_id`'s child started by a visitor's call of its
    fetch `tool` on the allowed url `fetch` (which must answer `says`), and its one gate.
    Raises AssertionError when the call fails or the plugin has not exactly one gate."""
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(60)) as http:  # the child's first start
        problem = await _call_in_a_new_session(http, url, tool, {"url": fetch}, says)
    assert problem is None, problem
    found = list(gates())
    assert len(found) == 1, f"{plugin_id}'s gates: {found}"
    return EgressTarget(found[0], port, plugin_id, gates, tool, fetch, says)


async def _call_in_a_new_session(
    http: httpx2.AsyncClient, url: str, tool: str, arguments: dict[str, Any], expected: str
) -> str | None:
    """None when a fresh public session's call of `tool` answers 200 with `expected` in it."""
    opened = await http.post(f"{url}/v1/sessions", json={})
    if opened.status_code != 201:
        return f"POST /v1/sessions {opened.status_code}"
    session = opened.json()
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments, "_meta": _client_meta()},
    }
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": "tools/call",
        "Mcp-Name": tool,
        "Authorization": f"Bearer {session['token']}",
    }
    answer = await http.post(session["mcp_url"], json=body, headers=headers)
    if answer.status_code != 200 or expected not in answer.text:
        return f"{tool} through a new session: {answer.status_code} {answer.text[:200]}"
    return None
