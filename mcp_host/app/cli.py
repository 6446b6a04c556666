"""`mcp-host`: the command line (docs/design.md "Interfaces").

Above: the user's shell. Below: `app` (serve), `plugins` (check, caps list) and the HTTP API
of a running host (session new, caps list's live status).
"""

from __future__ import annotations

import argparse
import json
import logging
import shlex
import socket
import sys
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

import anyio

from mcp_host.access import OWNER_TOKEN_FILE
from mcp_host.errors import HostError, InternalError, Unavailable
from mcp_host.owner import CatalogueEntry, entry_for, invalid_entry
from mcp_host.plugins import Installer, PackageInstaller, PluginKind, load_plugins
from mcp_host.sandbox import require_bwrap
from mcp_host.settings import OtelSettings, Settings, default_data_dir

from .check_command import run_check
from .door_client import Door, DoorFailed, DoorRefused, NoDoor, TokenRefused, call_door
from .host_file import HostRecord, read_host_file
from .plugin_commands import add_plugin_commands

if TYPE_CHECKING:
    from mcp_host.store import Uninstalled

__all__ = ["main"]


def _settings(args: argparse.Namespace) -> Settings:
    overrides: dict[str, Any] = {}
    for name in ("host", "port", "data_dir"):
        value = getattr(args, name, None)
        if value is not None:
            overrides[name] = value
    if getattr(args, "plugins", None):
        overrides["plugins"] = args.plugins
    if getattr(args, "allowed_hosts", None):
        overrides["allowed_hosts"] = args.allowed_hosts
    if getattr(args, "parent", None):
        overrides["parent_url"] = args.parent
    return Settings(**overrides)


def _serve(args: argparse.Namespace) -> int:
    from mcp_host.edge import server_config

    from .asgi import create_app
    from .drain import DrainingServer
    from .telemetry import configure_logging, start_tracing

    settings = _settings(args)
    configure_logging(settings.log_format)
    logging.getLogger("pgserver").setLevel(logging.WARNING)  # it logs every command line at INFO
    if settings.sandbox.mode == "on":
        require_bwrap()  # refuse before anything starts, with the install command
    try:
        listener = _listen(settings.host, settings.port)
    except OSError as exc:
        print(
            f"mcp-host: cannot listen on {settings.host}:{settings.port} ({exc.strerror or exc}); is another host"
            " running there? Choose another port with --port (0 picks a free one)",
            file=sys.stderr,
        )
        return 2
    # The port listened on (the real one for --port 0): the Host checks, the banner and
    # <data dir>/host.json name it.
    settings = settings.model_copy(update={"port": listener.getsockname()[1]})
    failed: list[bool] = []

    def on_fatal() -> None:  # the host ended by itself: exit non-zero so a supervisor restarts it
        failed.append(True)
        server.should_exit = True

    # The same config the tests run (http_server.py): timeouts, caps, loop, protocol. SIGTERM
    # drains first (drain.py): readiness 503, calls in flight finish, then a stop that exits 0.
    tracing = start_tracing(OtelSettings())  # before the app: its servers keep the SDK's spans then
    app = create_app(settings, on_fatal=on_fatal)
    server = DrainingServer(server_config(app, settings), app.drain)
    try:
        server.run(sockets=[listener])
    except InternalError:
        raise  # the host's own fault: its traceback, as for any exception the command does not know
    except HostError as exc:
        print(f"mcp-host: {exc.message}", file=sys.stderr)
        return 2
    finally:
        if tracing is not None:
            tracing.shutdown()  # exports the spans still batched
    return 1 if failed else 0


def _listen(host: str, port: int) -> socket.socket:
    """A socket listening on `host`:`port`, made before the host starts: a taken port fails at
    once (not after PostgreSQL and the plugins started), and port 0 becomes a real port before
    the app, whose Host checks name it, is built. Connections made meanwhile wait in the backlog.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP spelt out: asyncio turns Nagle off (TCP_NODELAY) only on sockets whose proto
    # says TCP, and accepted sockets inherit it. With proto 0 every 2026-07-28 answer (headers
    # and body in two writes) waited ~40 ms for the client's delayed ACK (bench: c 3.4 -> 48 ms).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except BaseException:
        sock.close()
        raise
    return sock


def _check(args: argparse.Namespace) -> int:
    checked = run_check(args.dirs, _settings(args), data_dir_named=args.data_dir is not None)
    for line in checked.out:
        print(line)
    for line in checked.err:
        print(line, file=sys.stderr)
    return checked.status


def _http(method: str, url: str, body: dict[str, Any] | None = None, token: str | None = None) -> Any:
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(url, data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


class _Unreachable(Unavailable):
    """A command cannot use the host it needs; the message is one line for the user."""


def _default_dir_hint(args: argparse.Namespace, settings: Settings) -> str:
    """For a message about the default data directory: that it is the default, and how to
    point the command at the one `scripts/run` uses (or any other). Empty for a chosen one."""
    if getattr(args, "data_dir", None) is not None or settings.data_dir != default_data_dir():
        return ""
    root = Path(__file__).resolve().parents[2]
    if (root / "scripts" / "run").is_file():
        theirs = shlex.quote(str(root / ".data"))
        return f" (the default; scripts/run uses {theirs}: add --data-dir {theirs})"
    return " (the default; point --data-dir or MCP_HOST_DATA_DIR at the host's)"


def _no_host(args: argparse.Namespace, settings: Settings) -> str:
    data_dir = settings.data_dir
    hint = _default_dir_hint(args, settings)
    fix = hint or f"; start one: mcp-host serve --data-dir {shlex.quote(str(data_dir))}"
    return f"no host is running with data directory {data_dir}{fix}"


def _host_url(args: argparse.Namespace, settings: Settings) -> tuple[str, HostRecord | None]:
    """The base URL to use — `--url`, else the one the data directory's running host wrote
    (host_file.py) — and that host, if one runs there."""
    record = read_host_file(settings.data_dir)
    if args.url:
        return str(args.url).rstrip("/"), record
    if record is None:
        raise _Unreachable(_no_host(args, settings))
    return record.url, record


def _owner_token_of(args: argparse.Namespace, settings: Settings, record: HostRecord | None) -> str:
    path = settings.data_dir / OWNER_TOKEN_FILE
    try:
        token = path.read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        token = ""
    if token:
        return token
    data_dir = shlex.quote(str(settings.data_dir))
    hint = _default_dir_hint(args, settings)
    if hint:
        raise _Unreachable(f"no owner token at {path}{hint}")
    if record is not None:
        raise _Unreachable(
            f"no owner token at {path}, and the host running there (pid {record.pid}) has none to give:"
            f" `mcp-host owner token --rotate --data-dir {data_dir}` makes one"
        )
    raise _Unreachable(
        f"no owner token yet at {path}; start the host once with this data directory:"
        f" mcp-host serve --data-dir {data_dir}"
    )


def _ask(
    method: str,
    url: str,
    path: str,
    context: tuple[argparse.Namespace, Settings, HostRecord | None],
    *,
    body: dict[str, Any] | None = None,
    token: str | None = None,
) -> Any:
    """`_http` to the host at `url`; any failure is `_Unreachable` with one line saying why."""
    args, settings, record = context
    try:
        return _http(method, url + path, body, token)
    except urllib.error.HTTPError as exc:
        raise _Unreachable(_refusal(exc, url, settings, record, owner=token is not None)) from None
    except json.JSONDecodeError:
        raise _Unreachable(f"the server at {url} is not an mcp-host (its answer to {path} is not JSON)") from None
    except (OSError, ValueError) as exc:  # URLError, a timeout, a malformed URL
        reason = getattr(exc, "reason", None) or exc
        why = " ".join(str(getattr(reason, "strerror", None) or reason).split())
        data_dir = settings.data_dir
        if record is not None and record.url != url:
            message = f"no host answers at {url} ({why}); the host of data directory {data_dir} listens on {record.url}"
            raise _Unreachable(message + ": drop --url") from None
        if record is not None:
            message = f"the host of data directory {data_dir} (pid {record.pid}) does not answer at {url} ({why})"
            raise _Unreachable(message + "; is it starting or stopping?") from None
        raise _Unreachable(f"no host answers at {url} ({why}); {_no_host(args, settings)}") from None


def _refusal(
    exc: urllib.error.HTTPError, url: str, settings: Settings, record: HostRecord | None, *, owner: bool
) -> str:
    data_dir = settings.data_dir
    if exc.code == 401 and owner:
        if record is not None and record.url != url:
            return (
                f"the host at {url} refused the owner token of data directory {data_dir}: it is another host;"
                f" the one of {data_dir} listens on {record.url}: drop --url"
            )
        return (
            f"the host at {url} refused the owner token in {data_dir / OWNER_TOKEN_FILE}: it is another host's or"
            f" was replaced (`mcp-host owner token --rotate --data-dir {shlex.quote(str(data_dir))}` makes a new one)"
        )
    if exc.code == 421:
        name = urlsplit(url).hostname or url
        return f"the host at {url} does not answer to the name {name}: start it with --allowed-host {name}"
    try:
        answer = " ".join(exc.read(300).decode(errors="replace").split())
    except OSError:
        answer = ""
    return f"the host at {url} answered {exc.code}: {answer}"


def _session_new(args: argparse.Namespace) -> int:
    settings = _settings(args)
    body: dict[str, Any] = {}
    visitor = {k: v for k, v in (("name", args.name), ("email", args.email)) if v}
    if visitor:
        body["visitor"] = visitor
    if args.code:
        body["code"] = args.code
    try:
        url, record = _host_url(args, settings)
        answer = _ask("POST", url, "/v1/sessions", (args, settings, record), body=body)
    except _Unreachable as exc:
        print(f"mcp-host: {exc}", file=sys.stderr)
        return 1
    print(json.dumps(answer, indent=2))
    return 0


def _caps_list(args: argparse.Namespace) -> int:
    settings = _settings(args)
    if args.url is None and read_host_file(settings.data_dir) is None:
        print(f"(manifests only: {_no_host(args, settings)})", file=sys.stderr)
        report = load_plugins(settings.builtin_dir, settings.plugins)
        _print_table([entry_for(p) for p in report.plugins] + [invalid_entry(e) for e in report.errors])
        return 0
    try:
        url, record = _host_url(args, settings)
        token = _owner_token_of(args, settings, record)
        raw = _ask("GET", url, "/v1/catalogue", (args, settings, record), token=token)
    except _Unreachable as exc:
        print(f"mcp-host: {exc}", file=sys.stderr)
        return 1
    _print_table([CatalogueEntry.model_validate(e) for e in raw["capabilities"]])
    return 0


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
    if args.rotate:
        path = anyio.run(_rotate_owner_token, settings)
        print(f"new owner token written to {path}")
        return 0
    try:
        token = _owner_token_of(args, settings, read_host_file(settings.data_dir))
    except _Unreachable as exc:
        print(f"mcp-host: {exc}", file=sys.stderr)
        return 1
    print(token)
    return 0


def _owner_bridge(args: argparse.Namespace) -> int:
    """The owner endpoint on stdio. A host that is not there, or refuses the token, is one line
    on stderr and exit 1 before anything is written to stdout: the client sees a closed pipe."""
    from mcp_host.owner import run_owner_bridge

    settings = _settings(args)
    try:
        url, record = _host_url(args, settings)
        token = _owner_token_of(args, settings, record)
        _ask("GET", url, "/v1/catalogue", (args, settings, record), token=token)  # answers, and takes the token
    except _Unreachable as exc:
        print(f"mcp-host: {exc}", file=sys.stderr)
        return 1
    try:
        anyio.run(run_owner_bridge, url, token)
    except Exception as exc:  # the host went away, or stopped taking the token, while bridged
        print(f"mcp-host: the bridge to the owner endpoint at {url} stopped: {_leaf_name(exc)}", file=sys.stderr)
        return 1
    return 0


def _leaf_name(exc: BaseException) -> str:
    """The type of the first exception that is not a group (the cause a task group wraps)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return type(exc).__name__


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
    if url is None:  # the host running with this data directory (host_file.py), on whatever port
        record = read_host_file(settings.data_dir)
        if record is None:
            data_dir = shlex.quote(str(settings.data_dir))
            print(
                f"mcp-host: no host is running with data directory {settings.data_dir}; start one:"
                f" mcp-host serve --data-dir {data_dir}",
                file=sys.stderr,
            )
            return None
        url = record.url
    return url.rstrip("/"), token


def _owner_profile(args: argparse.Namespace) -> int:
    settings = _settings(args)
    door = _running_owner_door(settings, args.url)
    if door is None:
        return 1
    base, token = door
    changes = {k: getattr(args, k) for k in ("name", "email", "timezone") if getattr(args, k) is not None}
    tool, arguments = ("owner_profile_set", changes) if changes else ("owner_profile_get", {})
    try:
        answer = anyio.run(call_door, Door(url=base, pid=None, token=token), tool, arguments)
    except TokenRefused:
        token_file = settings.data_dir / OWNER_TOKEN_FILE
        print(
            f"mcp-host: the host at {base} refused the owner token in {token_file}; is it another host's data"
            " directory? (`mcp-host owner token --rotate` issues a new one)",
            file=sys.stderr,
        )
        return 1
    except NoDoor:
        print(f"mcp-host: no host answered at {base}; start it with `mcp-host serve` (or pass --url)", file=sys.stderr)
        return 1
    except DoorFailed as exc:
        print(f"mcp-host: {exc.message}", file=sys.stderr)
        return 1
    except DoorRefused as exc:
        print(f"mcp-host: {exc.refusal.code}: {exc.refusal.message}", file=sys.stderr)
        return 1
    for field in ("name", "email", "timezone"):
        value = answer.get(field)
        print(f"{field + ':':<10}{value if value is not None else '(not set)'}")
    return 0


async def _rotate_owner_token(settings: Settings) -> Path:
    from mcp_host.access import write_owner_token_file
    from mcp_host.store import open_database

    from .shared import owner_store

    async with open_database(settings) as database:
        owners = owner_store(database.pool)  # the rotation ends the owner door's OAuth grants
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
    from mcp_host.store import open_database, uninstall

    async with open_database(settings) as database:
        return await uninstall(database.pool, kind, plugin_id)


_URL_HELP = "the host's base URL (default: the one the host wrote in its data directory)"


def _data_dir_help() -> str:
    return (
        f"the host's data directory: its database, owner token and host.json, where the commands find"
        f" the running host (default: {default_data_dir()}; env MCP_HOST_DATA_DIR)"
    )


def _parser(installer: Installer | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mcp-host", description="A sandboxing MCP proxy host.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_serve(sub)
    _add_check_caps_session(sub)
    _add_owner(sub)
    add_plugin_commands(sub, _data_dir_help(), installer or PackageInstaller())
    remove = sub.add_parser("uninstall", help="delete a plugin's data (its store and config values)")
    remove.add_argument("plugin_id")
    remove.add_argument("--kind", choices=["capability", "connector"], default="capability")
    remove.add_argument("--yes", action="store_true", help="really delete it")
    remove.add_argument("--data-dir", dest="data_dir", type=Path)
    remove.set_defaults(run=_uninstall)
    return parser


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=_data_dir_help())
    p.add_argument(
        "--plugins",
        nargs="+",
        type=Path,
        action="extend",
        metavar="DIR",
        help="plugin folders besides the builtins (default: none; env MCP_HOST_PLUGINS, separated by ':')",
    )


def _add_serve(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fields = Settings.model_fields
    serve = sub.add_parser(
        "serve",
        help="run the host",
        description="Run the host: its HTTP endpoints, its embedded PostgreSQL and its plugins.",
        epilog="Every other setting comes from the environment, one MCP_HOST_<NAME> variable each;"
        " mcp_host/settings/ lists them by group, each with its variable's name"
        " (e.g. MCP_HOST_DATABASE_URL, MCP_HOST_PUBLIC_URL, MCP_HOST_SANDBOX=off)."
        " A flag overrides its variable.",
    )
    serve.add_argument(
        "--host",
        help=f"the address to listen on (default: {fields['host'].default}; env MCP_HOST_HOST)",
    )
    serve.add_argument(
        "--port",
        type=int,
        help="the port to listen on; 0 picks a free one, which the host prints and writes to <data dir>/host.json"
        f" (default: {fields['port'].default}; env MCP_HOST_PORT)",
    )
    _common(serve)
    serve.add_argument(
        "--allowed-host",
        dest="allowed_hosts",
        action="append",
        metavar="NAME",
        help="a host name clients may use besides the listen address, e.g. behind a reverse proxy:"
        " mcp.example.org or mcp.example.org:443 (repeatable; default: none; env MCP_HOST_ALLOWED_HOSTS,"
        " comma-separated)",
    )
    serve.add_argument(
        "--parent",
        metavar="URL",
        help="run as a node of the host at URL: its capabilities granted to the token in MCP_HOST_PARENT_TOKEN"
        " (the parent owner's grant_create) become this host's (env MCP_HOST_PARENT_URL)",
    )
    serve.set_defaults(run=_serve)


def _add_check_caps_session(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    data_dir_help = _data_dir_help()
    check = sub.add_parser(
        "check",
        help="lint plugin folders; with a running host, what each still needs before a visitor can use it",
    )
    check.add_argument("dirs", nargs="+", metavar="DIR")
    check.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
    check.set_defaults(run=_check)

    caps = sub.add_parser("caps", help="capabilities").add_subparsers(dest="caps_command", required=True)
    caps_list = caps.add_parser("list", help="print the catalogue")
    caps_list.add_argument("--url", help=_URL_HELP)
    _common(caps_list)
    caps_list.set_defaults(run=_caps_list)

    session = sub.add_parser("session", help="visitor sessions").add_subparsers(dest="session_command", required=True)
    new = session.add_parser("new", help="open a public visitor session on a running host")
    new.add_argument("--url", help=_URL_HELP)
    new.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
    new.add_argument("--code", help="an access code the owner made (code_create): the session gets its role")
    new.add_argument("--name", help="the visitor's name")
    new.add_argument("--email", help="the visitor's email address")
    new.set_defaults(run=_session_new)


def _add_owner(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    data_dir_help = _data_dir_help()
    owner_door = sub.add_parser(
        "owner", help="the owner endpoint on stdio (a bridge to a running host); `owner token`: the credential"
    )
    owner_door.add_argument("--url", help=_URL_HELP)
    owner_door.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
    owner_door.set_defaults(run=_owner_bridge)
    owner = owner_door.add_subparsers(dest="owner_command")
    token = owner.add_parser("token", help="print (or --rotate) the owner token")
    token.add_argument("--rotate", action="store_true", help="issue a new token (the old one stops working)")
    token.add_argument("--data-dir", dest="data_dir", type=Path, metavar="DIR", help=data_dir_help)
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


def main(argv: Sequence[str] | None = None, *, installer: Installer | None = None) -> int:
    """Run the command `argv` (default: this process's arguments); exit status. `installer`
    installs the plugins `plugin add|upgrade` add with no host running (None: the real one)."""
    args = _parser(installer).parse_args(argv)
    try:
        code: int = args.run(args)
    except InternalError:
        raise  # the host's own fault: its traceback, as for any exception the command does not know
    except HostError as exc:
        print(f"mcp-host: {exc.message}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
