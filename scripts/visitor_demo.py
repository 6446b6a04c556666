"""A scripted visitor agent loop against a running host, printed step by step (`scripts/demo`).

No model is involved: the "agent" is this script, saying what an agent would say. It

1. sets the host up as the owner, through the owner door (`/v1/owner/mcp`): a calendar (when
   none is connected, a Radicale server it starts on loopback, connected with the `caldav`
   connector, which the owner lets reach that loopback address), a role granting
   `calendar.book`, and an access code for it;
2. opens a visitor session with that code and lists the session's tools;
3. turn 1: asks for slots, books the first one, and answers truthfully — the host's claim
   gate accepts the answer;
4. turn 2: books the same slot again (refused: `slot_taken`), answers falsely that it is
   booked — the host flags the answer — and then answers honestly, which passes;
5. cleans up: cancels the booking, revokes the code, and disconnects and stops the calendar
   it started.

Run it with `scripts/demo` while `scripts/run` serves the host; `--help` lists the options.
Above: a newcomer's terminal, and `tests/test_demo.py`. Below: the MCP SDK client and
the host's HTTP interface (docs/design.md "Interfaces").
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_host.app.host_file import read_host_file

CAPABILITY = "calendar.book"
ROLE = "demo_visitor"
DEMO_USER, DEMO_PASSWORD = "demo", uuid.uuid4().hex


class DemoError(Exception):
    """The demo cannot go on; the message says why and what to do."""


def say(text: str = "") -> None:
    print(text, flush=True)


# ---------------------------------------------------------------------------------------------
# MCP clients and calls


@asynccontextmanager
async def mcp_client(url: str, token: str) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=60)) as http:
        async with Client(streamable_http_client(url, http_client=http), cache=None) as client:
            yield client


async def call(client: Client, tool: str, **arguments: Any) -> tuple[bool, dict[str, Any]]:
    """(ok, structured content) of one tool call."""
    result = await client.call_tool(tool, arguments)
    return not result.is_error, dict(result.structured_content or {})


async def owner_call(owner: Client, tool: str, **arguments: Any) -> dict[str, Any]:
    ok, answer = await call(owner, tool, **arguments)
    if not ok:
        raise DemoError(f"owner tool {tool} refused: {answer.get('code')}: {answer.get('message')}")
    return answer


# ---------------------------------------------------------------------------------------------
# A calendar to book into


@contextmanager
def local_radicale() -> Iterator[str]:
    """A Radicale CalDAV server on a free loopback port with one empty calendar; its URL."""
    try:
        import caldav  # noqa: F401 - checked here so the message below can say what is missing
        import radicale  # noqa: F401
    except ImportError:
        raise DemoError("no calendar is connected and Radicale is not installed (pip install radicale)") from None
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = int(s.getsockname()[1])
    with tempfile.TemporaryDirectory(prefix="mcp-host-demo-") as folder:
        root = Path(folder)
        (root / "users").write_text(f"{DEMO_USER}:{DEMO_PASSWORD}\n")
        (root / "config").write_text(
            f"[server]\nhosts = 127.0.0.1:{port}\n"
            f"[auth]\ntype = htpasswd\nhtpasswd_filename = {root / 'users'}\nhtpasswd_encryption = plain\ndelay = 0\n"
            f"[rights]\ntype = owner_only\n[storage]\nfilesystem_folder = {root / 'collections'}\n"
            "[logging]\nlevel = warning\n"
        )
        with (root / "radicale.log").open("w") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "radicale", "--config", str(root / "config")], stdout=log, stderr=log
            )
        try:
            _wait_for(port, process)
            yield _new_calendar(f"http://127.0.0.1:{port}")
        finally:
            process.terminate()
            process.wait(timeout=10)


def _wait_for(port: int, process: subprocess.Popen[bytes], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while True:
        if process.poll() is not None:
            raise DemoError("Radicale exited at start")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                raise DemoError(f"Radicale did not listen within {timeout_s:g} s") from None
            time.sleep(0.05)


def _new_calendar(base: str) -> str:
    import caldav

    with caldav.DAVClient(url=f"{base}/", username=DEMO_USER, password=DEMO_PASSWORD) as client:
        return str(client.principal().make_calendar(name="Demo", cal_id=uuid.uuid4().hex).url)


async def ensure_calendar(owner: Client, stack: AsyncExitStack, use_connected: bool) -> None:
    listed = await owner_call(owner, "connectors_list")
    connected = [c for c in listed["connectors"] if c["category"] == "calendar" and c["connection"]]
    if connected:
        if not use_connected:
            raise DemoError(
                f"a calendar is already connected ({connected[0]['id']}); the demo would book into it. "
                "Pass --use-connected-calendar to go ahead (the demo cancels its booking again)."
            )
        say(f"  calendar: the connected {connected[0]['id']} calendar")
        return
    url = stack.enter_context(local_radicale())
    # The connector reaches public addresses only; this loopback server the owner names one by one.
    radicale = f"127.0.0.1:{urlsplit(url).port}"
    await owner_call(owner, "plugin_egress_allow", plugin_id="caldav", host=radicale, private=True)
    stack.push_async_callback(owner_call, owner, "plugin_egress_remove", plugin_id="caldav", host=radicale)
    settings = {"url": url, "username": DEMO_USER, "password": DEMO_PASSWORD}
    answer = await owner_call(owner, "connector_connect", connector="caldav", settings=settings)
    stack.push_async_callback(owner_call, owner, "connector_disconnect", category="calendar")
    say(f"  calendar: started Radicale on loopback and connected it: {answer['connected'].get('detail')}")


# ---------------------------------------------------------------------------------------------
# The visitor's side


async def post(http: httpx2.AsyncClient, url: str, body: dict[str, Any], token: str | None = None) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    response = await http.post(url, json=body, headers=headers)
    if response.status_code >= 400:
        raise DemoError(f"POST {url} answered {response.status_code}: {response.text[:200]}")
    return dict(response.json())


def next_monday() -> str:
    today = datetime.now(UTC).date()
    return (today + timedelta(days=7 + (7 - today.weekday()) % 7)).isoformat()


async def answer(http: httpx2.AsyncClient, turns: str, token: str, n: int, text: str) -> None:
    say(f'  agent answers: "{text}"')
    judged = await post(http, f"{turns}/{n}/answer", {"text": text}, token)
    if judged["ok"]:
        say("  host: ok")
    for v in judged.get("violations", []):
        say(f'  host: VIOLATION — "{v["phrase"]}" without a successful {v["tool"]} in this turn')


async def visitor_loop(base: str, http: httpx2.AsyncClient, session: dict[str, Any]) -> str | None:
    """Turns 1 and 2; the id of the booking made (None if none was)."""
    turns, token = f"{base}/v1/sessions/{session['session_id']}/turns", session["token"]
    async with mcp_client(session["mcp_url"], token) as visitor:
        names = sorted(t.name for t in (await visitor.list_tools()).tools)
        say(f"  tools: {', '.join(names)}")

        message = "Could I get half an hour with you next week?"
        n = (await post(http, turns, {"message": message}, token))["turn"]
        say(f'\n== turn {n}: the visitor says "{message}"')
        ok, listed = await call(visitor, "calendar_list_slots", date_from=next_monday(), days=5)
        if not ok or not listed["slots"]:
            raise DemoError(f"no slots to book: {listed}")
        slots = listed["slots"]
        say(f"  agent → calendar_list_slots: {len(slots)} free slots ({listed['policy']['timezone']}), e.g.")
        for slot in slots[:3]:
            say(f"      {slot['start']} – {slot['end']}")
        start = slots[0]["start"]
        ok, booked = await call(visitor, "calendar_book", start=start, topic="Demo call")
        say(f"  agent → calendar_book {start}: {'ok' if ok else 'refused'} {booked}")
        await answer(http, turns, token, n, f"I've booked you in for {start}.")

        message = "Great — and the same time for my colleague, please."
        n = (await post(http, turns, {"message": message}, token))["turn"]
        say(f'\n== turn {n}: the visitor says "{message}"')
        ok, again = await call(visitor, "calendar_book", start=start, topic="Colleague")
        say(f"  agent → calendar_book {start}: {'ok' if ok else 'refused'} {again.get('code')}: {again.get('message')}")
        say("  (an agent that does not check the result might claim success anyway:)")
        await answer(http, turns, token, n, f"Done, your colleague is booked too — you're booked for {start}.")
        say("  (the honest answer:)")
        await answer(http, turns, token, n, "I could not book it: that slot is already booked. Shall I try another?")

        if ok or not booked.get("ok"):
            return None
        booking_id = str(booked["booking"]["id"])
        ok, cancelled = await call(visitor, "calendar_cancel", booking_id=booking_id)
        say(f"\n== clean-up\n  agent → calendar_cancel: {'ok' if ok else 'refused'} {cancelled}")
        return booking_id


async def check_host(http: httpx2.AsyncClient, base: str, owner_token: str) -> None:
    """Fail early, with a message, when no host answers or the owner token is refused."""
    try:
        answer = await http.get(f"{base}/v1/catalogue", headers={"Authorization": f"Bearer {owner_token}"})
    except httpx2.HTTPError:
        raise DemoError(f"no host answers at {base}: start one with scripts/run (or pass --url)") from None
    if answer.status_code == 401:
        raise DemoError("the host refused the owner token (pass --owner-token or --data-dir)")


async def demo(base: str, owner_token: str, use_connected: bool) -> None:
    async with AsyncExitStack() as stack, httpx2.AsyncClient(timeout=30) as http:
        await check_host(http, base, owner_token)
        say(f"== owner: setting up {base} through the owner door")
        owner = await stack.enter_async_context(mcp_client(f"{base}/v1/owner/mcp", owner_token))
        await ensure_calendar(owner, stack, use_connected)
        await owner_call(owner, "role_put", id=ROLE, capabilities=[CAPABILITY])
        code = await owner_call(owner, "code_create", role=ROLE, config={CAPABILITY: {"max_bookings": 3}})
        stack.push_async_callback(owner_call, owner, "code_revoke", code=code["id"])
        say(f"  role {ROLE} grants {CAPABILITY}; access code {code['id']} issued for it")

        visitor = {"name": "Ada Demo", "email": "ada@example.org"}
        session = await post(http, f"{base}/v1/sessions", {"code": code["code"], "visitor": visitor})
        say(f"\n== visitor: session {session['session_id'][:8]}… opened with the code")
        await visitor_loop(base, http, session)
    say("  code revoked; a calendar the demo connected is disconnected and stopped")


def owner_token(args: argparse.Namespace) -> str:
    if args.owner_token:
        return str(args.owner_token)
    path = Path(args.data_dir) / "owner-token"
    try:
        return path.read_text().strip()
    except OSError:
        raise DemoError(f"no owner token at {path}: start the host with scripts/run, or pass --owner-token") from None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--url", help="the running host (default: the one serving --data-dir, else http://127.0.0.1:8765)"
    )
    parser.add_argument(
        "--data-dir",
        default=os.environ.get("MCP_HOST_DATA_DIR", str(Path(__file__).resolve().parent.parent / ".data")),
        help="the host's data directory, for the owner token (default: $MCP_HOST_DATA_DIR or .data)",
    )
    parser.add_argument("--owner-token", help="the owner token (default: read from the data directory)")
    parser.add_argument(
        "--use-connected-calendar", action="store_true", help="book into the calendar already connected"
    )
    args = parser.parse_args(argv)
    if args.url is None:  # the host scripts/run started with this data directory, on whatever port
        running = read_host_file(Path(args.data_dir))
        args.url = running.url if running is not None else "http://127.0.0.1:8765"
    try:
        anyio.run(demo, args.url.rstrip("/"), owner_token(args), args.use_connected_calendar)
    except DemoError as exc:
        print(f"demo: {exc}", file=sys.stderr)
        return 1
    except (httpx2.HTTPError, OSError) as exc:
        print(
            f"demo: could not talk to the host at {args.url} ({type(exc).__name__}); is scripts/run serving it?",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
