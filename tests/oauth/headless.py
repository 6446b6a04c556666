"""A headless "browser" for the front desk: what a person does between a client's authorize
URL and its redirect URI, with no JavaScript and no rendering.

From the authorize URL it follows redirects to the desk page (`GET /oauth/desk?request=…`, or
`/owner/consent` for the owner door),
reads its form with the standard library's HTML parser, fills the fields the page asks for
(`name`, `email`, `code`, `owner_token`) from `DeskAnswers`, submits `decision=allow` (or
`deny`) with the hidden fields kept, and follows the 302 to the client's redirect URI, which it
GETs, so that a client's loopback callback server receives the code (`visit_callback=False`
stops before that, for a client that reads the code from the URL instead).

Also a program: `python -m tests.oauth.headless URL` is what a client that opens a browser
runs (Claude Code runs `$BROWSER URL`). It reads the answers from `MCP_DESK_NAME`,
`MCP_DESK_EMAIL`, `MCP_DESK_CODE`, `MCP_DESK_OWNER_TOKEN` and `MCP_DESK_DECISION`, and
appends one JSON line per visit to the file `MCP_DESK_LOG` names (what the page asked, where it
landed, or the error). `write_browser_program` writes the executable a client is given.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from dataclasses import asdict, dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin, urlsplit

import anyio
import httpx2

__all__ = [
    "DeskAnswers",
    "DeskForm",
    "DeskVisit",
    "answers_from_environment",
    "read_form",
    "sign_in",
    "write_browser_program",
]

FILLED = ("name", "email", "code", "owner_token")
"""The fields of the desk's form a person types into (the preamble's form contract)."""
_MAX_HOPS = 10
_REDIRECTS = (301, 302, 303, 307, 308)
_ENVIRONMENT = {
    "name": "MCP_DESK_NAME",
    "email": "MCP_DESK_EMAIL",
    "code": "MCP_DESK_CODE",
    "owner_token": "MCP_DESK_OWNER_TOKEN",
}


class DeskError(Exception):
    """The desk did not behave as the form contract says (no form, no redirect back)."""


@dataclass(frozen=True)
class DeskAnswers:
    """What the person types into the desk's page; None: leave that field as the page has it."""

    name: str | None = None
    email: str | None = None
    code: str | None = None
    owner_token: str | None = None
    decision: str = "allow"

    def typed(self) -> dict[str, str]:
        return {key: value for key in FILLED if (value := getattr(self, key)) is not None}


@dataclass(frozen=True)
class DeskForm:
    """The desk page's form: where it posts, its fields (name -> value as served, with type),
    and the values of its `decision` buttons."""

    action: str
    method: str
    fields: dict[str, str]
    types: dict[str, str]
    decisions: tuple[str, ...]

    @property
    def asked(self) -> list[str]:
        """The fields a person types into, among `FILLED`, in the contract's order."""
        return [name for name in FILLED if name in self.fields]


@dataclass
class DeskVisit:
    """One trip through the desk: every URL the browser was at, the form it was shown, where
    the desk sent it back to, and the callback's answer status (None: not visited)."""

    visited: list[str] = field(default_factory=list)
    form: DeskForm | None = None
    page: str = ""
    landed: str = ""
    callback_status: int | None = None


class _FormReader(HTMLParser):
    """The first `<form>` of a page: its attributes, inputs, selects, textareas and buttons."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.forms: list[dict[str, object]] = []
        self._current: dict[str, object] | None = None
        self._textarea: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = {key: value or "" for key, value in attrs}
        if tag == "form":
            self._current = {"attrs": found, "fields": {}, "types": {}, "decisions": []}
            self.forms.append(self._current)
        elif self._current is not None and "name" in found:
            self._field(tag, found)

    def _field(self, tag: str, found: dict[str, str]) -> None:
        assert self._current is not None
        fields, types = self._current["fields"], self._current["types"]
        decisions = self._current["decisions"]
        assert isinstance(fields, dict) and isinstance(types, dict) and isinstance(decisions, list)
        kind = found.get("type", "submit" if tag == "button" else "text").lower()
        if kind == "submit" or tag == "button":
            if found["name"] == "decision":
                decisions.append(found.get("value", ""))
            return
        if tag in ("input", "textarea", "select"):
            if kind in ("checkbox", "radio") and "checked" not in found:
                return
            fields[found["name"]] = found.get("value", "")
            types[found["name"]] = tag if tag != "input" else kind
            self._textarea = found["name"] if tag == "textarea" else None

    def handle_data(self, data: str) -> None:
        if self._current is not None and self._textarea is not None:
            fields = self._current["fields"]
            assert isinstance(fields, dict)
            fields[self._textarea] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "textarea":
            self._textarea = None
        elif tag == "form":
            self._current = None


def read_form(page: str, page_url: str) -> DeskForm:
    """The form of the desk page at `page_url` (the one with `decision` buttons). Raises
    DeskError when the page has none."""
    reader = _FormReader()
    reader.feed(page)
    for found in reader.forms:
        attrs, fields, types, decisions = found["attrs"], found["fields"], found["types"], found["decisions"]
        assert isinstance(attrs, dict) and isinstance(fields, dict) and isinstance(types, dict)
        assert isinstance(decisions, list)
        if decisions:
            action = urljoin(page_url, attrs.get("action") or page_url)
            return DeskForm(action, (attrs.get("method") or "get").upper(), fields, types, tuple(decisions))
    raise DeskError(f"the page at {page_url} has no form with a decision button")


def _same_origin(one: str, other: str) -> bool:
    a, b = urlsplit(one), urlsplit(other)
    return (a.scheme, a.netloc) == (b.scheme, b.netloc)


def _as_a_browser_posts(page_url: str, action: str) -> dict[str, str]:
    """The headers a browser adds to a form's POST: where the page came from, and whether
    that is the form's own origin (the desk refuses a POST from another site's page)."""
    origin = "{0.scheme}://{0.netloc}".format(urlsplit(page_url))
    return {"Origin": origin, "Sec-Fetch-Site": "same-origin" if _same_origin(page_url, action) else "cross-site"}


async def _to_desk(http: httpx2.AsyncClient, url: str, visit: DeskVisit) -> httpx2.Response:
    """GET `url` and follow its redirects to the first page that answers 200."""
    for _ in range(_MAX_HOPS):
        visit.visited.append(url)
        response = await http.get(url)
        if response.status_code not in _REDIRECTS:
            if response.status_code != 200:
                raise DeskError(f"{url} answered {response.status_code}: {response.text[:300]}")
            return response
        url = urljoin(url, response.headers["location"])
    raise DeskError(f"more than {_MAX_HOPS} redirects from {visit.visited[0]}")


async def sign_in(url: str, answers: DeskAnswers, *, visit_callback: bool = True, timeout_s: float = 30.0) -> DeskVisit:
    """Go from the authorize `url` through the desk to the client's redirect URI (see the
    module's docstring). Raises DeskError when the desk does not end with a redirect away from
    itself, or when the page lacks a field `answers` fills."""
    visit = DeskVisit()
    async with httpx2.AsyncClient(timeout=timeout_s, follow_redirects=False) as http:
        with anyio.fail_after(timeout_s):
            page = await _to_desk(http, url, visit)
            visit.page = page.text
            form = visit.form = read_form(page.text, str(page.url))
            missing = sorted(set(answers.typed()) - set(form.fields))
            if missing:
                raise DeskError(f"the desk page does not ask for {', '.join(missing)} (it asks {form.asked})")
            if answers.decision not in form.decisions:
                raise DeskError(f"the desk page offers no {answers.decision!r} (it offers {form.decisions})")
            body = {**form.fields, **answers.typed(), "decision": answers.decision}
            if form.method != "POST":
                raise DeskError(f"the desk's form is sent with {form.method}, not POST")
            visit.visited.append(form.action)
            answer = await http.post(form.action, data=body, headers=_as_a_browser_posts(str(page.url), form.action))
            if answer.status_code not in _REDIRECTS:
                raise DeskError(f"the desk answered {answer.status_code}, not a redirect: {answer.text[:300]}")
            visit.landed = urljoin(form.action, answer.headers["location"])
            if _same_origin(visit.landed, form.action) and urlsplit(visit.landed).path.startswith(
                ("/oauth/desk", "/owner/consent")
            ):
                raise DeskError(f"the desk sent the browser back to itself: {visit.landed}")
            if visit_callback:
                visit.callback_status = (await http.get(visit.landed)).status_code
    return visit


# -- as a program: $BROWSER URL ---------------------------------------------------------------


def answers_from_environment(environ: dict[str, str]) -> DeskAnswers:
    typed = {key: environ[variable] for key, variable in _ENVIRONMENT.items() if environ.get(variable)}
    return DeskAnswers(**typed, decision=environ.get("MCP_DESK_DECISION") or "allow")


def _log(path: str | None, entry: dict[str, object]) -> None:
    if path:
        with open(path, "a", encoding="utf-8") as log:
            log.write(json.dumps(entry) + "\n")


def main(argv: list[str], environ: dict[str, str]) -> int:
    """Sign in through the desk at the URL `argv[1]`; 0 when the client's callback was reached."""
    url, log = argv[1], environ.get("MCP_DESK_LOG")
    try:
        visit = anyio.run(sign_in, url, answers_from_environment(environ))
    except (DeskError, httpx2.HTTPError, TimeoutError) as exc:
        _log(log, {"url": url, "error": f"{type(exc).__name__}: {exc}"})
        return 1
    found = asdict(visit)
    found.pop("page")
    _log(log, {"url": url, **found})
    return 0


def write_browser_program(path: Path, python: str, repo: Path) -> Path:
    """An executable at `path` that runs this module on its first argument: what a client's
    `BROWSER` variable names. The answers come from the client's environment (`MCP_DESK_*`)."""
    path.write_text(
        f'#!/bin/sh\ncd {shlex.quote(str(repo))} && exec {shlex.quote(python)} -m tests.oauth.headless "$1"\n',
        encoding="utf-8",
    )
    path.chmod(0o755)
    return path


if __name__ == "__main__":
    sys.exit(main(sys.argv, dict(os.environ)))  # noqa: TID251 - a program of its own, not the host
