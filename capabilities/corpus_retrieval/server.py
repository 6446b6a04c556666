"""corpus.retrieval: visitors search and read the documents the owner added, corpus by corpus.

    corpus_search {query, corpus?, limit?} -> {hits: [{id, corpus, title, part, parts, rank,
                                               snippet}], searched}                  (visitors)
    corpus_read   {id, part?}              -> {id, corpus, title, part, parts, text, source?, url?}
    corpus_list   {corpus?}                -> {corpora: [{name, count, documents, more}]}
    corpus_add       {corpus, title, text, source?, url?} -> {id, corpus, title, chars, parts}
                                                             (owner: `corpus.add`)
    corpus_documents {corpus?}             -> {documents, total, truncated}   (owner: `corpus.list`)
    corpus_remove    {id}                  -> {removed, parts}                (owner: `corpus.remove`)

Storage (the plugin's own store): `documents` holds one row per document without its text
(`doc_id`, `corpus`, `title`, `source`, `url`, `chars`, `parts`); `passages` holds the text in
parts of at most `PART_CHARS` characters, cut at a paragraph, line, sentence or word break
(`doc_id`, `corpus`, `part`, `parts`, `title`, `text`). Search ranks passages (the host's
`store.search` over `title` then `text`, so a title word weighs more), so a hit points at the
part to read and no answer carries a whole long document. Passages are written before the
document row and removed with it; a document exists for readers once its row does.

Which corpora a session reads: its role's `corpora` (role config). Unset, the default is
`["public"]`; an empty list reads nothing (fail closed). A corpus the role does not list
answers exactly like one that does not exist (`not_found`), and a document of such a corpus
like an unknown id; names in the role config that are not corpus names are ignored.

Owner tools answer the owner only: they are left out of this server's `tools/list`, so no
visitor's session lists them (the owner door calls them by their declared names), and they
refuse any call that is not in owner context.

Refusals: `invalid_arguments` (bad query, name, id, part or sizes), `not_found` (no such
corpus or document, or one the session may not read), and the host's codes for the ops.

Below: the plugin kit (host ops `store.*` and `config.get`).
"""

from __future__ import annotations

import logging
import re
import uuid
from typing import Any

import mcp.types as types
from mcp.server.mcpserver import Context

from mcp_host_kit import Denied, Host, HostOpError, InvalidArguments, Kit, PluginServer, SearchHit, tool_errors

logger = logging.getLogger("corpus_retrieval")

DOCUMENTS = "documents"
PASSAGES = "passages"
PART_CHARS = 4000
MAX_TEXT_CHARS = 200_000
MAX_TITLE_CHARS = 300
MAX_SOURCE_CHARS = 300
MAX_URL_CHARS = 2000
MAX_QUERY_CHARS = 500
MAX_HITS = 20
DEFAULT_HITS = 8
LIST_DOCUMENTS = 50  # per corpus, for visitors
OWNER_LIST = 500  # the most `store.query` returns in one call
DEFAULT_CORPORA = ("public",)
OWNER_ONLY = frozenset({"corpus_add", "corpus_documents", "corpus_remove"})

_CORPUS = re.compile(r"\A[a-z0-9][a-z0-9_-]{0,63}\Z")
_DOC_ID = re.compile(r"\A[0-9a-f]{32}\Z")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")  # tab and line breaks stay
_LINE_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029]")
_URL = re.compile(r"\Ahttps?://[\x21-\x7e]+\Z")
# Where a part may end, best first; searched in the last quarter of a part's window.
_BREAKS = ("\n\n", "\n", ". ", " ")


class _Server(PluginServer):
    """Lists the visitor tools only: the owner's tools are called by name through the owner door."""

    async def list_tools(self) -> list[types.Tool]:
        return [tool for tool in await super().list_tools() if tool.name not in OWNER_ONLY]


mcp = _Server("corpus.retrieval", version="1", log_level="WARNING")
kit = Kit(__file__)


def _not_found(what: str) -> HostOpError:
    return HostOpError("not_found", what)


# ---------------------------------------------------------------------------------------------
# Checking arguments


def _corpus_name(value: object) -> str:
    if not isinstance(value, str) or _CORPUS.fullmatch(value) is None:
        raise InvalidArguments("corpus must be 1-64 characters of a-z, 0-9, _ and -, starting with a letter or digit")
    return value


def _doc_id(value: object) -> str:
    if not isinstance(value, str) or _DOC_ID.fullmatch(value) is None:
        raise InvalidArguments("id is not a document id (32 hexadecimal digits, as search and list give them)")
    return value


def _line(name: str, value: object, limit: int, *, required: bool) -> str | None:
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value) > limit or _LINE_CONTROL.search(value):
        raise InvalidArguments(f"{name} must be 1-{limit} characters on one line")
    return value.strip()


def _query(value: object) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_QUERY_CHARS:
        raise InvalidArguments(f"query must be 1-{MAX_QUERY_CHARS} characters with at least one word")
    return _LINE_CONTROL.sub(" ", value)


def _count(name: str, value: object, low: int, high: int) -> int:
    if type(value) is not int or not low <= value <= high:
        raise InvalidArguments(f"{name} must be an integer from {low} to {high}")
    return value


# ---------------------------------------------------------------------------------------------
# Which corpora this call may read


async def _readable(host: Host) -> list[str]:
    """The corpora of this session's role, in the order the role lists them (fail closed: a
    value that is not a list of corpus names reads as no corpus)."""
    value = (await host.config.get()).role_config.get("corpora")
    if value is None:
        return list(DEFAULT_CORPORA)
    if not isinstance(value, list):
        logger.warning("role config corpora is not a list; no corpus is readable")
        return []
    names = [item for item in value if isinstance(item, str) and _CORPUS.fullmatch(item)]
    if len(names) != len(value):
        logger.warning("role config corpora: %d value(s) that are not corpus names ignored", len(value) - len(names))
    return list(dict.fromkeys(names))


async def _targets(host: Host, corpus: str | None) -> list[str]:
    """The corpora a visitor's call reaches: `corpus` if the role lists it, else every one."""
    readable = await _readable(host)
    if corpus is None:
        return readable
    if _corpus_name(corpus) not in readable:
        raise _not_found(f"no corpus named {corpus!r}")
    return [corpus]


async def _document(host: Host, doc_id: str, readable: list[str] | None) -> dict[str, Any]:
    """The document row of `doc_id`; `not_found` when there is none or (with `readable`) the
    session may not read its corpus — the same answer, so an id reveals nothing."""
    rows = await host.store.query(DOCUMENTS, {"doc_id": _doc_id(doc_id)}, limit=1)
    if not rows or (readable is not None and rows[0].doc.get("corpus") not in readable):
        raise _not_found("no document with this id")
    return rows[0].doc


def _described(doc: dict[str, Any], *keys: str) -> dict[str, Any]:
    """`keys` of a stored row, with the optional `source` and `url` only when set."""
    shown = {key: doc.get(key) for key in keys}
    shown.update({key: doc[key] for key in ("source", "url") if doc.get(key)})
    return shown


# ---------------------------------------------------------------------------------------------
# Visitor tools


@mcp.tool()
@tool_errors
async def corpus_search(
    query: str, ctx: Context, corpus: str | None = None, limit: int = DEFAULT_HITS
) -> dict[str, Any]:
    """Search the documents you may read; best matches first, each with a snippet (matched
    words in **) and the part to read with corpus_read. Query syntax: words (all must appear),
    "a phrase" in double quotes, `or` between alternatives, -word to exclude. Words are matched
    exactly (no stemming): try variants with `or`. `corpus` narrows the search to one corpus."""
    text, count = _query(query), _count("limit", limit, 1, MAX_HITS)
    host = kit.host(ctx)
    targets = await _targets(host, corpus)
    hits: list[SearchHit] = []
    for name in targets:
        hits.extend(
            await host.store.search(PASSAGES, text, fields=["title", "text"], filter={"corpus": name}, limit=count)
        )
    hits.sort(key=lambda hit: -hit.rank)  # stable: within a rank, the role's corpus order
    return {
        "hits": [
            {
                **_described(hit.doc, "corpus", "title", "part", "parts"),
                "id": hit.doc.get("doc_id"),
                "rank": round(hit.rank, 6),
                "snippet": hit.snippet,
            }
            for hit in hits[:count]
        ],
        "searched": targets,
    }


@mcp.tool()
@tool_errors
async def corpus_read(id: str, ctx: Context, part: int = 1) -> dict[str, Any]:
    """Read one part (about 4000 characters) of a document, by the id that search or list gave."""
    host = kit.host(ctx)
    doc = await _document(host, id, await _readable(host))
    parts = int(doc.get("parts") or 0)
    number = _count("part", part, 1, max(parts, 1))
    rows = await host.store.query(PASSAGES, {"doc_id": id, "part": number}, limit=1)
    if not rows:
        raise _not_found("no document with this id")
    return {**_described(doc, "corpus", "title", "parts"), "id": id, "part": number, "text": rows[0].doc.get("text")}


@mcp.tool()
@tool_errors
async def corpus_list(ctx: Context, corpus: str | None = None) -> dict[str, Any]:
    """The corpora you may read, each with its number of documents and the first 50 (id,
    title, parts); `corpus` lists one corpus only."""
    host = kit.host(ctx)
    corpora = []
    for name in await _targets(host, corpus):
        total = await host.store.count(DOCUMENTS, {"corpus": name})
        rows = await host.store.query(DOCUMENTS, {"corpus": name}, limit=LIST_DOCUMENTS)
        documents = [{"id": r.doc.get("doc_id"), **_described(r.doc, "title", "parts")} for r in rows]
        corpora.append({"name": name, "count": total, "documents": documents, "more": total > len(documents)})
    return {"corpora": corpora}


# ---------------------------------------------------------------------------------------------
# Owner tools


def _owner_host(ctx: Context) -> Host:
    host = kit.host(ctx)
    if host.session.mode != "owner":
        raise Denied("this tool answers the owner only")
    return host


def split_text(text: str, size: int = PART_CHARS) -> list[str]:
    """`text` in parts of at most `size` characters, each cut at the best break (paragraph,
    line, sentence, word) in the last quarter of its window, else hard at `size`."""
    parts: list[str] = []
    rest = text.strip()
    while len(rest) > size:
        window = rest[:size]
        cut = next((window.rfind(b) + len(b) for b in _BREAKS if window.rfind(b) >= size * 3 // 4), size)
        parts.append(rest[:cut].strip())
        rest = rest[cut:].strip()
    if rest:
        parts.append(rest)
    return [part for part in parts if part]


@mcp.tool()
@tool_errors
async def corpus_add(
    corpus: str, title: str, text: str, ctx: Context, source: str | None = None, url: str | None = None
) -> dict[str, Any]:
    """Add a document to a corpus (owner only)."""
    host = _owner_host(ctx)
    name, heading = _corpus_name(corpus), _line("title", title, MAX_TITLE_CHARS, required=True)
    origin = _line("source", source, MAX_SOURCE_CHARS, required=False)
    if url is not None and (len(url) > MAX_URL_CHARS or _URL.fullmatch(url) is None):
        raise InvalidArguments(f"url must be an http:// or https:// URL of at most {MAX_URL_CHARS} characters")
    if not isinstance(text, str) or len(text) > MAX_TEXT_CHARS or not text.strip():
        raise InvalidArguments(f"text must be 1-{MAX_TEXT_CHARS} characters with something in them")
    parts = split_text(_CONTROL.sub("", text.replace("\r\n", "\n")))
    doc_id = uuid.uuid4().hex
    try:
        for number, part in enumerate(parts, start=1):
            passage = {"doc_id": doc_id, "corpus": name, "part": number, "parts": len(parts), "title": heading}
            await host.store.insert(PASSAGES, {**passage, "text": part})
        row = {"doc_id": doc_id, "corpus": name, "title": heading, "chars": sum(map(len, parts)), "parts": len(parts)}
        row.update({key: value for key, value in (("source", origin), ("url", url)) if value})
        await host.store.insert(DOCUMENTS, row)
    except HostOpError:
        # Leave no parts of a document that was never added; the refusal is the caller's answer.
        try:
            await host.store.delete(PASSAGES, filter={"doc_id": doc_id})
        except HostOpError as error:
            logger.warning("parts of an unfinished document were left behind (%s)", error.code)
        raise
    return {"id": doc_id, "corpus": name, "title": heading, "chars": row["chars"], "parts": len(parts)}


@mcp.tool()
@tool_errors
async def corpus_documents(ctx: Context, corpus: str | None = None) -> dict[str, Any]:
    """Every document of `corpus` (or of all corpora), oldest first, without text (owner only)."""
    host = _owner_host(ctx)
    where = None if corpus is None else {"corpus": _corpus_name(corpus)}
    total = await host.store.count(DOCUMENTS, where)
    rows = await host.store.query(DOCUMENTS, where, limit=OWNER_LIST)
    documents = [
        {
            "id": r.doc.get("doc_id"),
            **_described(r.doc, "corpus", "title", "chars", "parts"),
            "added_at": r.created_at.isoformat(),
        }
        for r in rows
    ]
    return {"documents": documents, "total": total, "truncated": total > len(documents)}


@mcp.tool()
@tool_errors
async def corpus_remove(id: str, ctx: Context) -> dict[str, Any]:
    """Remove a document and its parts (owner only)."""
    host = _owner_host(ctx)
    doc_id = _doc_id(id)
    parts = await host.store.delete(PASSAGES, filter={"doc_id": doc_id})
    removed = await host.store.delete(DOCUMENTS, filter={"doc_id": doc_id})
    return {"removed": removed > 0, "parts": parts}


if __name__ == "__main__":
    mcp.run()
