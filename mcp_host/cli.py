"""`mcp-host`: the command line (DESIGN.md "Interfaces").

Above: the user's shell. Below: `app` (serve), `plugins` (check, caps list) and the HTTP API
of a running host (session new, caps list's live status).
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio

from .catalogue import CatalogueEntry, entry_for, invalid_entry
from .errors import HostError
from .owners import OWNER_TOKEN_FILE
from .plugin_store import PluginKind
from .plugins import check_paths, load_plugins
from .sandbox import require_bwrap
from .settings import Settings

if TYPE_CHECKING:
    import mcp.types as types

    from .uninstall import Uninstalled

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "plugins", None):
        overrides["plugins"] = args.plugins
    return Settings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    import uvicorn

    from .app import create_app
    from .http_server import server_config

    settings = _settings(args)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every command line at INFO
    if settings.sandbox == "on":
        require_bwrap()  # refuse before anything starts, with the install command
    failed: list[bool] = []

    def on_fatal() -> None:  # the host ended by itself: exit non-zero so a supervisor restarts it
        failed.append(True)
        server.should_exit = True

    # The same config the tests run (http_server.py): timeouts, caps, loop, protocol.
    server = uvicorn.Server(server_config(create_app(settings, on_fatal=on_fatal), settings))
    try:
        server.run()
    except HostError as exc:
        print(f"mcp-host: {exc.message}", file=sys.stderr)
        return 2
    return 1 if failed else 0


def _check(args: argparse.Namespace) -> int:
    settings = _settings(args)
    paths = [Path(p) for p in args.dirs]
    report = check_paths(paths, builtin_root=settings.builtin_dir)
    for error in report.errors:
        print(f"error: {error.message}")
    for warning in report.warnings:
        print(f"warning: {warning.message}")
    if not report.errors:
        print(f"ok: {', '.join(args.dirs)}")
    return 1 if report.errors else 0


def _http(method: str, url: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def _session_new(args: argparse.Namespace) -> int:
    settings = _settings(args)
    url = (args.url or settings.base_url).rstrip("/")
    visitor = {k: v for k, v in (("name", args.name), ("email", args.email)) if v}
    try:
        answer = _http("POST", f"{url}/v1/sessions", {"visitor": visitor} if visitor else {})
    except urllib.error.HTTPError as exc:
        print(f"mcp-host: the host answered {exc.code}: {exc.read().decode(errors='replace')}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(f"mcp-host: no host at {url} ({exc}); start it with `mcp-host serve`", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def _caps_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    entries = _live_entries(settings, args.url)
    if entries is None:
        note = f"(no running host answered with the owner token in {settings.data_dir}: manifests only)"
        print(note, file=sys.stderr)
        report = load_plugins(settings.builtin_dir, settings.plugins)
        entries = [entry_for(p) for p in report.plugins]
        entries += [invalid_entry(e) for e in report.errors]
    _print_table(entries)
    return 0


def _live_entries(settings: Settings, url: str | None) -> list[CatalogueEntry] | None:
    token_file = settings.data_dir / "owner-token"
    if not token_file.exists():
        return None
    base = (url or settings.base_url).rstrip("/")
    try:
        raw = _http("GET", f"{base}/v1/catalogue", token=token_file.read_text().strip())
    except OSError:
        return None
    return [CatalogueEntry.model_validate(e) for e in raw["capabilities"]]


def _print_table(entries: Sequence[CatalogueEntry]) -> None:
    rows = [("ID", "KIND", "ACL", "REQUIRES", "VISITOR TOOLS", "STATUS")]
    for e in entries:
        status = e.status if not e.cause else f"{e.status}: {e.cause}"
        rows.append((e.id, e.kind, e.acl, ",".join(e.requires) or "-", ",".join(e.visitor_tools) or "-", status))
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]) - 1)]
    for row in rows:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1])


def _owner_token(args: argparse.Namespace) -> int:
    settings = _settings(args)
    token_file = settings.data_dir / "owner-token"
    if args.rotate:
        path = anyio.run(_rotate_owner_token, settings)
        print(f"new owner token written to {path}")
        return 0
    if not token_file.exists():
        print(f"mcp-host: no owner token yet at {token_file}; start the host once", file=sys.stderr)
        return 1
    print(token_file.read_text().strip())
    return 0


def _owner_bridge(args: argparse.Namespace) -> int:
    from .owner_bridge import run_owner_bridge

    settings = _settings(args)
    token_file = settings.data_dir / "owner-token"
    try:
        token = token_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if not token:
        print(f"mcp-host: no owner token at {token_file}; start the host once", file=sys.stderr)
        return 1
    anyio.run(run_owner_bridge, (args.url or settings.base_url).rstrip("/"), token)
    return 0


def _running_owner_door(settings: Settings, url: str | None) -> tuple[str, str] | None:
    """The base URL and owner token of the running host, for a command that calls its owner
    door; None, having printed one line saying why, when there is no token to use."""
    token_file = settings.data_dir / OWNER_TOKEN_FILE
    try:
        token = token_file.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if not token:
        print(f"mcp-host: no owner token at {token_file}; start the host once", file=sys.stderr)
        return None
    return (url or settings.base_url).rstrip("/"), token


def _owner_profile(args: argparse.Namespace) -> int:
    settings = _settings(args)
    door = _running_owner_door(settings, args.url)
    if door is None:
        return 1
    base, token = door
    changes = {k: getattr(args, k) for k in ("name", "email", "timezone") if getattr(args, k) is not None}
    tool, arguments = ("owner_profile_set", changes) if changes else ("owner_profile_get", {})
    statuses: list[int] = []
    try:
        result = anyio.run(_call_owner_tool, base, token, tool, arguments, statuses)
    except Exception as exc:
        token_file = settings.data_dir / OWNER_TOKEN_FILE
        print(f"mcp-host: {_unreachable(exc, base, token_file, refused=401 in statuses)}", file=sys.stderr)
        return 1
    answer = result.structured_content or {}
    if result.is_error:
        print(f"mcp-host: {answer.get('code', 'error')}: {answer.get('message', '')}", file=sys.stderr)
        return 1
    for field in ("name", "email", "timezone"):
        value = answer.get(field)
        print(f"{field + ':':<10}{value if value is not None else '(not set)'}")
    return 0


async def _call_owner_tool(
    base: str, token: str, tool: str, arguments: dict[str, Any], statuses: list[int]
) -> types.CallToolResult:
    """Call one owner tool; `statuses` gets every HTTP status the host answered (the SDK turns
    a 401 into a JSON-RPC error that no longer says it was one)."""
    import httpx2
    from mcp import Client
    from mcp.client.streamable_http import streamable_http_client

    from .owner_bridge import OWNER_MCP_PATH

    async def note(response: httpx2.Response) -> None:
        statuses.append(response.status_code)

    headers = {"Authorization": f"Bearer {token}"}
    timeout = httpx2.Timeout(10, read=60)
    async with httpx2.AsyncClient(headers=headers, timeout=timeout, event_hooks={"response": [note]}) as http:
        transport = streamable_http_client(base + OWNER_MCP_PATH, http_client=http)
        async with Client(transport, cache=None) as client:
            return await client.call_tool(tool, arguments)


def _unreachable(exc: BaseException, base: str, token_file: Path, *, refused: bool) -> str:
    """One line for a failed call to the owner door: the token refused, or no host there."""
    import httpx2

    if refused:
        return (
            f"the host at {base} refused the owner token in {token_file}; "
            "is it another host's data directory? (`mcp-host owner token --rotate` issues a new one)"
        )
    leaves: list[BaseException] = []
    stack: list[BaseException] = [exc]
    while stack:
        current = stack.pop()
        if isinstance(current, BaseExceptionGroup):
            stack.extend(current.exceptions)
        else:
            leaves.append(current)
    if any(isinstance(leaf, httpx2.TransportError | OSError) for leaf in leaves):
        return f"no host answered at {base}; start it with `mcp-host serve` (or pass --url)"
    return f"the owner door at {base} did not answer ({type(leaves[0]).__name__ if leaves else 'no cause'})"


async def _rotate_owner_token(settings: Settings) -> Path:
    from .database import open_database
    from .owners import OwnerStore, write_owner_token_file

    async with open_database(settings) as database:
        owners = OwnerStore(database.pool)
        owner = await owners.ensure_single_owner()
        token = await owners.issue_token(owner.id)
        return write_owner_token_file(settings.data_dir, token)


def _uninstall(args: argparse.Namespace) -> int:
    if not args.yes:
        print(
            f"mcp-host: this deletes every record, claim and config value of {args.plugin_id} for every owner;"
            " run again with --yes to do it",
            file=sys.stderr,
        )
        return 1
    try:
        done = anyio.run(_uninstall_now, _settings(args), args.kind, args.plugin_id)
    except ValueError as exc:
        print(f"mcp-host: {exc}", file=sys.stderr)
        return 2
    store = "dropped its store" if done.schema_dropped else "it had no store"
    print(f"uninstalled {args.plugin_id}: {store}; deleted {done.config_rows_deleted} config row(s)")
    return 0


async def _uninstall_now(settings: Settings, kind: PluginKind, plugin_id: str) -> Uninstalled:
    from .database import open_database
    from .uninstall import uninstall

    async with open_database(settings) as database:
        return await uninstall(database.pool, kind, plugin_id)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-host", description="A sandboxing MCP proxy host.")
    sub = parser.add_subparsers(dest="command", required=True)

    def common(p: argparse.ArgumentParser) -> None:
        p.add_argument("--data-dir", dest="data_dir", type=Path)
        p.add_argument("--plugins", nargs="+", type=Path, action="extend", metavar="DIR")

    serve = sub.add_parser("serve", help="run the host")
    serve.add_argument("--host")
    serve.add_argument("--port", type=int)
    common(serve)
    serve.set_defaults(run=_serve)

    check = sub.add_parser("check", help="lint plugin folders")
    check.add_argument("dirs", nargs="+", metavar="DIR")
    check.set_defaults(run=_check)

    caps = sub.add_parser("caps", help="capabilities").add_subparsers(dest="caps_command", required=True)
    caps_list = caps.add_parser("list", help="print the catalogue")
    caps_list.add_argument("--url", help="a running host (default: from settings)")
    common(caps_list)
    caps_list.set_defaults(run=_caps_list)

    session = sub.add_parser("session", help="visitor sessions").add_subparsers(dest="session_command", required=True)
    new = session.add_parser("new", help="open a public visitor session on a running host")
    new.add_argument("--url", help="the host's base URL (default: from settings)")
    new.add_argument("--name")
    new.add_argument("--email")
    new.set_defaults(run=_session_new)

    owner_door = sub.add_parser(
        "owner", help="the owner endpoint on stdio (a bridge to a running host); `owner token`: the credential"
    )
    owner_door.add_argument("--url", help="the host's base URL (default: from settings)")
    owner_door.add_argument("--data-dir", dest="data_dir", type=Path)
    owner_door.set_defaults(run=_owner_bridge)
    owner = owner_door.add_subparsers(dest="owner_command")
    token = owner.add_parser("token", help="print (or --rotate) the owner token")
    token.add_argument("--rotate", action="store_true")
    token.add_argument("--data-dir", dest="data_dir", type=Path)
    token.set_defaults(run=_owner_token)
    profile = owner.add_parser(
        "profile", help='show the owner\'s profile, or set fields of it ("" unsets one) on the running host'
    )
    profile.add_argument("--name", help="your name, one line")
    profile.add_argument("--email", help="your email address, e.g. ada@example.com")
    profile.add_argument("--timezone", help="an IANA timezone, e.g. Europe/Berlin")
    profile.add_argument("--url", help="the host's base URL (default: from settings)")
    profile.add_argument("--data-dir", dest="data_dir", type=Path)
    profile.set_defaults(run=_owner_profile)

    remove = sub.add_parser("uninstall", help="delete a plugin's data (its store and config values)")
    remove.add_argument("plugin_id")
    remove.add_argument("--kind", choices=["capability", "connector"], default="capability")
    remove.add_argument("--yes", action="store_true", help="really delete it")
    remove.add_argument("--data-dir", dest="data_dir", type=Path)
    remove.set_defaults(run=_uninstall)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        code: int = args.run(args)
    except HostError as exc:
        print(f"mcp-host: {exc.message}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
