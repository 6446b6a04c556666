"""Tool search: a session that sees many tools lists a few, and finds and calls the rest.

Above: `visitor.door` (its `list_tools` shapes the list here; its call path answers
`find_tools` here and runs `call_tool`'s inner call through every gate a direct call passes).
Below: tantivy (BM25 over an in-memory index), the owner's host settings (the threshold).

A session whose visible tools number more than the owner's `tool_search_threshold` (default 40)
lists its working set (the tools `find_tools` found for it, the most recent `_WORKING_SET`) and
two host tools: `find_tools {query, limit?}`, the best matches among the session's visible tools
with their full definitions (never a tool for an app only, `_meta.ui.visibility: ["app"]`, which is
listed beside the working set instead), and `call_tool {name, arguments}`, a call of any visible tool by
name. A session at or under the threshold lists exactly what it would without search.

The index ranks with BM25 over a tool's name (snake_case and camelCase split into words),
title, description and its parameters' names and descriptions, English-stemmed; it is built
once per distinct tool set (the same tool objects, else the same definitions by hash), in a
worker thread, and kept for the `_INDEXES` most recent sets. The working set lives in this
replica's memory: a session served by another replica lists that replica's (every visible
tool stays callable, directly and through `call_tool`, on any replica).
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import sys
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any, NamedTuple

import anyio
import mcp.types as types
import tantivy
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from mcp_host.access import Session
from mcp_host.errors import InvalidArguments, log_unless_outage
from mcp_host.wire import app_only, check_json_object, without_host_keys

__all__ = [
    "CALL_TOOL",
    "FIND_TOOLS",
    "HOST_TOOLS",
    "InnerCall",
    "ToolIndex",
    "ToolSearch",
    "host_tools",
    "words",
]

logger = logging.getLogger(__name__)

FIND_TOOLS = "find_tools"
CALL_TOOL = "call_tool"
HOST_TOOLS = frozenset({FIND_TOOLS, CALL_TOOL})
MAX_QUERY_CHARS = 500
MAX_LIMIT = 50
_DEFAULT_LIMIT = 5
# Tools a session's working set keeps (the most recently found); sessions remembered per replica.
_WORKING_SET = 20
_SESSIONS = 10_000
# Distinct tool sets whose index is kept; how long an owner's threshold is read from memory.
_INDEXES = 16
_THRESHOLD_TTL_S = 1.0
_NO_SEARCH = sys.maxsize
# What of one tool is indexed: parameters (depth), and characters of a field.
_PARAM_DEPTH = 2
_FIELD_CHARS = 8_000
_QUERY_WORDS = 64
# Bounds on a host tool's arguments (call_tool's carry the inner call's: a request's worth).
_MAX_BYTES = 4 * 1024 * 1024
_MAX_DEPTH = 64
# BM25 scores per field are weighted: a description says most of what a tool is for; a parameter's
# text least. Chosen on half the bench's queries, checked on the other half (mcp_host/README.md).
_BOOSTS = {"name": 1.0, "title": 1.0, "description": 2.0, "params": 0.3}

# Words a request is made of that say nothing of the tool it wants.
_STOP = frozenset(
    "a an and are as at be by can could do does for from has have how i if in into is it its me my "
    "of on or our please s so some that the their them then there these this those to us was we "
    "what when where which who why will with would you your".split()
)
# Words tools and their callers use for one thing: a request's word also looks for the others
# (the vocabulary of tools in general, reading and writing things: never what a capability is
# about, which the host does not know).
_GROUPS = (
    "create make new add",
    "delete remove drop erase",
    "list show all",
    "get fetch retrieve show",
    "search find look lookup query",
    "update change edit modify set",
    "folder directory dir",
    "file document",
    "image picture photo",
    "message post",
)
_RELATED: dict[str, tuple[str, ...]] = {}
for _group in _GROUPS:
    for _word in _group.split():
        _RELATED[_word] = _RELATED.get(_word, ()) + tuple(w for w in _group.split() if w != _word)
_RELATED_WEIGHT = 0.4
_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"[^\W_]+")

ThresholdOf = Callable[[str], Awaitable[int]]
"""An owner's tool search threshold (`Access.host_settings(owner).tool_search_threshold`)."""
Told = Callable[[str], None]
"""Tells one session (by id) that its tool list changed (`ChangeFeed.tell_session`)."""


def words(text: str) -> str:
    """`text` as lowercase words, snake_case, kebab-case, dotted and camelCase names split, a
    camelCase word kept whole as well: `getFileInfo` is "getfileinfo get file info", so the query
    "GitHub" meets the name `github_create_issue`. Nothing but words and spaces stays, so the
    result is also a query tantivy's parser reads as plain terms (no syntax, no operators)."""
    found: list[str] = []
    for token in _WORD.findall(text):
        parts = _CAMEL.sub(" ", token).split()
        found.append(token.lower())
        if len(parts) > 1:
            found.extend(part.lower() for part in parts)
    return " ".join(found)


def _query(text: str) -> str:
    """A visitor's request as a tantivy query: its words less the stop words, each with its
    related words (`_RELATED`) at a lower weight."""
    terms: list[str] = []
    for word in dict.fromkeys(words(text).split()):
        if word in _STOP:
            continue
        terms.append(word)
        terms.extend(f"{other}^{_RELATED_WEIGHT}" for other in _RELATED.get(word, ()) if other != word)
        if len(terms) >= _QUERY_WORDS:
            break
    return " ".join(terms[:_QUERY_WORDS])


class InnerCall(NamedTuple):
    """`call_tool`'s inner call: the tool it names and that tool's arguments."""

    name: str
    arguments: dict[str, Any] | None


class _Find(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    query: str = Field(min_length=1, max_length=MAX_QUERY_CHARS)
    limit: int = Field(default=_DEFAULT_LIMIT, ge=1, le=MAX_LIMIT)


class _Call(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=256)
    arguments: dict[str, Any] | None = None


def host_tools() -> list[types.Tool]:
    """The two host tools' definitions, as a session above the threshold lists them: the same
    objects every time, so a list's serialisation keyed on its tools stays cached (`tools_list`)."""
    return list(_host_tools())


@cache
def _host_tools() -> tuple[types.Tool, ...]:
    return (
        types.Tool(
            name=FIND_TOOLS,
            title="Find tools",
            description=(
                "This session has more tools than it lists. Describe what you want to do; the best "
                "matching tools come back with their full definitions (name, description, input "
                "schema). Call one directly, or with call_tool."
            ),
            input_schema={
                "type": "object",
                "properties": {
                    "query": {
                        "type": "string",
                        "minLength": 1,
                        "maxLength": MAX_QUERY_CHARS,
                        "description": "What you want to do, in a few words.",
                    },
                    "limit": {
                        "type": "integer",
                        "minimum": 1,
                        "maximum": MAX_LIMIT,
                        "default": _DEFAULT_LIMIT,
                        "description": "How many tools to return at most.",
                    },
                },
                "required": ["query"],
                "additionalProperties": False,
            },
            annotations=types.ToolAnnotations(read_only_hint=True, open_world_hint=False),
        ),
        types.Tool(
            name=CALL_TOOL,
            title="Call a tool",
            description=("Call any tool of this session by its name (one find_tools returned) with its arguments."),
            input_schema={
                "type": "object",
                "properties": {
                    "name": {"type": "string", "minLength": 1, "description": "The tool's name."},
                    "arguments": {"type": "object", "description": "The tool's arguments, as its input schema says."},
                },
                "required": ["name"],
                "additionalProperties": False,
            },
        ),
    )


def _checked(model: type[_Find] | type[_Call], tool: str, arguments: dict[str, Any] | None) -> Any:
    """`arguments` as `model`: plain JSON (no lone surrogate, no huge number, bounded) of the
    model's shape; InvalidArguments naming the field (never echoing the value)."""
    checked = check_json_object(
        {} if arguments is None else arguments, what=f"{tool}'s arguments", max_bytes=_MAX_BYTES, max_depth=_MAX_DEPTH
    )
    try:
        return model.model_validate(checked)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        where = ".".join(str(part) for part in first["loc"]) or "arguments"
        raise InvalidArguments(f"{tool}: {where}: {first['msg']}") from None


# -- the index ---------------------------------------------------------------------------------------


def _params(schema: Any, depth: int = 0) -> Iterable[str]:
    """The names and descriptions of a JSON Schema's properties, nested ones to `_PARAM_DEPTH`."""
    properties = schema.get("properties") if isinstance(schema, dict) else None
    if not isinstance(properties, dict) or depth >= _PARAM_DEPTH:
        return
    for name, sub in properties.items():
        yield words(str(name))
        if isinstance(sub, dict):
            for key in ("title", "description"):
                if isinstance(sub.get(key), str):
                    yield sub[key]
            yield from _params(sub, depth + 1)
            yield from _params(sub.get("items"), depth + 1)


def _document(tool: types.Tool, position: int) -> tantivy.Document:
    titles = [tool.title or "", tool.annotations.title or "" if tool.annotations else ""]
    return tantivy.Document(
        name=words(tool.name),
        title=" ".join(t for t in titles if t)[:_FIELD_CHARS],
        description=(tool.description or "")[:_FIELD_CHARS],
        params=" ".join(_params(tool.input_schema))[:_FIELD_CHARS],
        position=position,
    )


def _schema() -> tantivy.Schema:
    builder = tantivy.SchemaBuilder()
    for field in _BOOSTS:
        builder.add_text_field(field, stored=False, tokenizer_name="en_stem")
    builder.add_integer_field("position", stored=True, indexed=False)
    return builder.build()


class ToolIndex:
    """BM25 over one tool set: `search` returns the best matching tools, best first."""

    def __init__(self, tools: Sequence[types.Tool]) -> None:
        """Builds the index (tens of milliseconds for hundreds of tools: run it off the loop)."""
        self.tools = tuple(tools)
        self._index = tantivy.Index(_schema())
        writer = self._index.writer(heap_size=15_000_000, num_threads=1)
        for position, tool in enumerate(self.tools):
            if tool.name not in HOST_TOOLS:  # a child's tool of that name is shadowed while search is on
                writer.add_document(_document(tool, position))
        writer.commit()
        writer.wait_merging_threads()
        self._index.reload()
        self._searcher = self._index.searcher()

    def search(self, query: str, limit: int) -> list[types.Tool]:
        terms = _query(query)
        if not terms:
            return []
        parsed = self._index.parse_query(terms, list(_BOOSTS), field_boosts=_BOOSTS)
        hits = self._searcher.search(parsed, limit).hits
        return [self.tools[self._searcher.doc(address)["position"][0]] for _, address in hits]


def _digest(tools: Sequence[types.Tool]) -> str:
    """One tool set's identity by content: its definitions, in name order."""
    ordered = sorted(tools, key=lambda t: t.name)
    text = json.dumps([t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in ordered], sort_keys=True)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


class _Indexes:
    """The indexes of the most recent distinct tool sets: found by the tools' identities (the
    entry holds the tools, so their ids stay theirs), else by the definitions' hash."""

    def __init__(self) -> None:
        self._by_ids: OrderedDict[tuple[int, ...], tuple[tuple[types.Tool, ...], ToolIndex]] = OrderedDict()
        self._by_digest: OrderedDict[str, ToolIndex] = OrderedDict()
        self._lock = anyio.Lock()

    async def of(self, tools: Sequence[types.Tool]) -> ToolIndex:
        ids = tuple(id(t) for t in tools)
        kept = self._by_ids.get(ids)
        if kept is not None:
            self._by_ids.move_to_end(ids)
            return kept[1]
        async with self._lock:  # one build of a new set, however many sessions ask at once
            digest = await anyio.to_thread.run_sync(_digest, tools)
            index = self._by_digest.get(digest)
            if index is None:
                started = time.perf_counter()
                index = await anyio.to_thread.run_sync(ToolIndex, tools)
                took_ms = (time.perf_counter() - started) * 1e3
                logger.debug("tool search: %d tools indexed in %.1f ms", len(tools), took_ms)
            _remember(self._by_digest, digest, index)
            _remember(self._by_ids, ids, (tuple(tools), index))
            return index


def _remember(cache: OrderedDict[Any, Any], key: Any, value: Any) -> None:
    cache[key] = value
    cache.move_to_end(key)
    while len(cache) > _INDEXES:
        cache.popitem(last=False)


# -- per session ---------------------------------------------------------------------------------


@dataclass
class _Threshold:
    value: int
    until: float


class ToolSearch:
    """The threshold, the indexes and each session's working set (see the module docstring)."""

    def __init__(self, threshold_of: ThresholdOf, told: Told | None = None) -> None:
        """`told`: where a session whose working set grew is told its list changed (the
        change feed; None: no one)."""
        self._threshold_of = threshold_of
        self._told = told
        self._thresholds: dict[str, _Threshold] = {}
        self._indexes = _Indexes()
        self._working: OrderedDict[str, OrderedDict[str, None]] = OrderedDict()

    async def active(self, owner_id: str, tools: Sequence[types.Tool]) -> bool:
        """Whether a session of `owner_id` seeing `tools` lists through search."""
        return len(tools) > await self._threshold(owner_id)

    async def _threshold(self, owner_id: str) -> int:
        """The owner's threshold, read at most once per `_THRESHOLD_TTL_S`. One that cannot be
        read is the last one read, else no search at all (every tool listed, as before search:
        the threshold shapes the list, it guards nothing)."""
        now = time.monotonic()
        kept = self._thresholds.get(owner_id)
        if kept is not None and kept.until > now:
            return kept.value
        try:
            value = await self._threshold_of(owner_id)
        except Exception as exc:
            log_unless_outage(
                exc,
                logger,
                "the tool search threshold could not be read; %s",
                "the last one read holds" if kept is not None else "no session lists through search for now",
            )
            value = kept.value if kept is not None else _NO_SEARCH
        self._thresholds[owner_id] = _Threshold(value, now + _THRESHOLD_TTL_S)
        return value

    async def shown(self, session: Session, tools: list[types.Tool]) -> list[types.Tool]:
        """What `session` lists: `tools` unchanged at or under the threshold, else its working
        set and the tools for apps only (in `tools`' order), and the two host tools. An app's
        own tools are listed because a client may refuse an app's call of a tool it has not
        listed; a client keeps them from the model (`wire.app_only`)."""
        if not await self.active(session.owner_id, tools):
            return tools
        working = set(self.working_set(session.id))
        listed = [t for t in tools if (t.name in working or app_only(t)) and t.name not in HOST_TOOLS]
        return listed + host_tools()

    async def answer(
        self,
        session: Session,
        tools: list[types.Tool],
        name: str,
        arguments: dict[str, Any] | None,
        offered: Callable[[types.Tool], bool] | None = None,
    ) -> types.CallToolResult | InnerCall | None:
        """A call of a host tool by a session seeing `tools`: `find_tools`' result, or
        `call_tool`'s inner call (which the caller runs through every gate), or None when this
        session does not list through search (the name is then any other tool's).
        Raises InvalidArguments."""
        if name not in HOST_TOOLS or not await self.active(session.owner_id, tools):
            return None
        if name == CALL_TOOL:
            call: _Call = _checked(_Call, CALL_TOOL, arguments)
            if call.name in HOST_TOOLS:
                raise InvalidArguments("call_tool: name: calls a tool of this session, not find_tools or call_tool")
            return InnerCall(call.name, call.arguments)
        find: _Find = _checked(_Find, FIND_TOOLS, arguments)
        return await self.find(session.id, tools, find.query, find.limit, offered)

    async def find(
        self,
        session_id: str,
        tools: list[types.Tool],
        query: str,
        limit: int,
        offered: Callable[[types.Tool], bool] | None = None,
    ) -> types.CallToolResult:
        """The best `limit` matches of `query` among `tools` (those `offered`, when given; never
        a tool for apps only, `wire.app_only`), as a result; they join the session's working
        set, and the session is told when it grew."""
        index = await self._indexes.of(tools)

        def to_model(tool: types.Tool) -> bool:
            return not app_only(tool) and (offered is None or offered(tool))

        left_out = sum(1 for t in tools if not to_model(t))
        found = [t for t in index.search(query, limit + left_out) if to_model(t)][:limit]
        self._join(session_id, [t.name for t in found])
        shown = without_host_keys(found)
        listed = [t.model_dump(mode="json", by_alias=True, exclude_none=True) for t in shown]
        structured = {"tools": listed}
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=json.dumps(structured, ensure_ascii=False))],
            structured_content=structured,
        )

    def _join(self, session_id: str, names: list[str]) -> None:
        working = self._working.get(session_id)
        if working is None:
            if not names:
                return
            working = self._working[session_id] = OrderedDict()
            while len(self._working) > _SESSIONS:
                self._working.popitem(last=False)
        self._working.move_to_end(session_id)
        grew = False
        for name in names:
            grew = grew or name not in working
            working[name] = None
            working.move_to_end(name)
        while len(working) > _WORKING_SET:
            working.popitem(last=False)
        if grew and self._told is not None:
            self._told(session_id)

    def working_set(self, session_id: str) -> tuple[str, ...]:
        """The names in `session_id`'s working set, least recently found first."""
        return tuple(self._working.get(session_id, ()))

    def forget(self, session_id: str) -> None:
        self._working.pop(session_id, None)
