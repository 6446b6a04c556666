"""The manifest's `transport`: how the host reaches a plugin's MCP server — a sandboxed stdio
child (its command, arguments, environment and sandbox) or a remote server over streamable
HTTP (its url, headers and the hosts it may reach) — and the grammar of each of its values.

Above: `model.Manifest` (its `transport` and `limits`), `sandbox.launch` (which starts a stdio
child from it) and `children.factory` (which reaches an http one). Below: `grammar`.
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, Self
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    StringConstraints,
    model_validator,
)

from ..egress_rules import parse_rule
from ..text_safety import check_text, shown
from .grammar import HostOp, Key, Strict, problem, unique

__all__ = ["Sandbox", "Transport", "url_host"]

_ENV_KEY_RE = re.compile(r"\A[A-Za-z_][A-Za-z0-9_]{0,127}\Z")
_URL_RE = re.compile(r"\Ahttps?://[\x21-\x7e]+\Z")
_RESERVED_ENV_PREFIX = "MCP_HOST_"


def _no_nul(value: str) -> str:
    if "\x00" in value:
        raise ValueError("contains NUL")
    return value


def _command(value: str) -> str:
    if not value or value.startswith("-"):
        raise ValueError("must be a program name or path, not empty and not starting with '-'")
    return check_text(value, "command", multiline=False, max_bytes=4096)


def _env_key(value: str) -> str:
    if not _ENV_KEY_RE.match(value):
        raise ValueError(f"{shown(value)} is not an environment variable name")
    if value.startswith(_RESERVED_ENV_PREFIX):
        raise ValueError(f"{shown(value)} is reserved for the host ({_RESERVED_ENV_PREFIX}*)")
    return value


def _egress_entry(value: str) -> str:
    try:
        parse_rule(value)
    except ValueError as exc:
        # parse_rule's message starts with the entry's repr; shown() bounds what is echoed.
        said = str(exc)
        rest = said[len(repr(value)) :] if said.startswith(repr(value)) else " is not a valid egress entry"
        raise ValueError(f"egress entry {shown(value)}{rest}") from None
    return value


def _url(value: str) -> str:
    if len(value) > 2048 or not _URL_RE.match(value):
        raise ValueError("must be an http:// or https:// URL without spaces or control characters")
    return value


Arg = Annotated[StrictStr, StringConstraints(max_length=4096), AfterValidator(_no_nul)]

# Headers the host's HTTP client and the MCP transport set themselves; a manifest may not.
_RESERVED_HEADERS = frozenset(
    {
        "host",
        "content-length",
        "content-type",
        "accept",
        "connection",
        "transfer-encoding",
        "upgrade",
        "te",
        "trailer",
        "keep-alive",
        "proxy-authorization",
        "proxy-connection",
        "mcp-session-id",
        "mcp-protocol-version",
        "mcp-method",
        "mcp-name",
        "last-event-id",
    }
)
_HEADER_NAME_RE = re.compile(r"\A[A-Za-z0-9!#$%&'*+.^_`|~-]{1,128}\Z")
_HEADER_VALUE_RE = re.compile(r"\A[\x20-\x7e]{0,4096}\Z")
_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
_HOST_NAME_RE = re.compile(rf"\A(?=.{{1,253}}\Z)(?:{_LABEL}\.)*{_LABEL}\Z|\A\[[0-9A-Fa-f:.]{{2,45}}\]\Z")


def _header_name(value: str) -> str:
    if not _HEADER_NAME_RE.match(value):
        raise ValueError(f"{shown(value)} is not an HTTP header name")
    if value.casefold() in _RESERVED_HEADERS or value.casefold().startswith("mcp-param-"):
        raise ValueError(f"{shown(value)} is set by the host's MCP client, not by a manifest")
    return value


def _header_value(value: str) -> str:
    if not _HEADER_VALUE_RE.match(value):
        raise ValueError("a header value is printable ASCII without control characters, at most 4096")
    return value


def _host_name(value: str) -> str:
    if not _HOST_NAME_RE.match(value):
        raise ValueError(f"{shown(value)} is not a host name (or an IP address, an IPv6 one in [brackets])")
    return value.casefold()


HeaderValue = Annotated[StrictStr, AfterValidator(_header_value)]
HostName = Annotated[StrictStr, AfterValidator(_host_name)]
EgressEntry = Annotated[StrictStr, StringConstraints(max_length=300), AfterValidator(_egress_entry)]


def url_host(url: str) -> str | None:
    """The host part of `url`, lower-cased (an IPv6 address in brackets), or None."""
    try:
        parts = urlsplit(url)
        host = parts.hostname
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        return None
    if not host:
        return None
    return f"[{host}]" if ":" in host else host.casefold()


class Sandbox(Strict):
    """What a stdio child may reach beyond its own folder (only a stdio transport has one)."""

    host_ops: Annotated[tuple[HostOp, ...], unique("host op")] = ()
    allow_net: StrictBool = False
    """Any public address at any port, through the host's egress proxy (`egress_rules`)."""
    workspace: StrictBool = False
    egress: Annotated[tuple[EgressEntry, ...], Field(max_length=64), unique("egress entry", fold=True)] = ()
    """The hosts the child may connect to through the host's egress proxy: `host`, `host:port`,
    `*.domain`, `*.domain:port`, an address (`plugins.egress_rules`). Each is reached at public
    addresses only unless named in `allow_private`."""
    allow_private: Annotated[tuple[HostName, ...], Field(max_length=32), unique("private host", fold=True)] = ()
    """The hosts (names or addresses) the child may reach at a loopback or private address; a
    link-local or cloud-metadata address only when it is named here itself."""


class Transport(Strict):
    """How the host reaches the plugin's MCP server: a sandboxed stdio child or a remote URL."""

    kind: Literal["stdio", "http"] = "stdio"
    command: Annotated[StrictStr, AfterValidator(_command)] | None = None
    args: Annotated[tuple[Arg, ...], Field(max_length=256)] = ()
    """May hold `${config.KEY}`, the owner's value of a config field at each start (`config_refs`)."""
    env: Annotated[dict[Annotated[StrictStr, AfterValidator(_env_key)], Arg], Field(max_length=256)] = Field(
        default_factory=dict
    )
    """Values may hold `${config.KEY}`, as `args` (a secret field too: it stays off command lines)."""
    url: Annotated[StrictStr, AfterValidator(_url)] | None = None
    sandbox: Sandbox = Field(default_factory=Sandbox)
    env_from_config: Annotated[dict[Annotated[StrictStr, AfterValidator(_env_key)], Key], Field(max_length=64)] = Field(
        default_factory=dict
    )
    """Environment variable -> owner `config` key: the owner's value (a secret opened) is put in
    the child's environment when it starts; unset and not required, the variable is left out."""
    headers: Annotated[dict[Annotated[StrictStr, AfterValidator(_header_name)], HeaderValue], Field(max_length=64)] = (
        Field(default_factory=dict)
    )
    """http only: header name -> value, sent with every request to the remote server."""
    headers_from_config: Annotated[
        dict[Annotated[StrictStr, AfterValidator(_header_name)], Key], Field(max_length=16)
    ] = Field(default_factory=dict)
    """http only: header name -> owner `config` key whose value (a secret opened) is the header's
    value (e.g. `Authorization` -> a value `Bearer …`); unset and not required, it is left out."""
    timeout_s: Annotated[StrictInt | StrictFloat, Field(gt=0, le=3600)] | None = None
    """http only: how long one HTTP exchange with the remote server may take (connect, read);
    absent: the host's call timeout."""
    allowed_hosts: Annotated[tuple[HostName, ...], Field(max_length=32), unique("allowed host", fold=True)] = ()
    """http only: the host names the host may connect to for this plugin; the url's host must be
    one of them, and a redirect elsewhere is refused. Absent: the url's host alone. Naming a host
    here lets it be reached at public addresses only (`allow_private`)."""
    allow_private: Annotated[tuple[HostName, ...], Field(max_length=32), unique("private host", fold=True)] = ()
    """http only: the hosts (names or addresses) that may be reached at a loopback or private
    address; a link-local or cloud-metadata address (169.254.169.254, fd00:ec2::254) only when it
    is named here itself (`plugins.addresses`). Absent: public addresses only."""
    sign_in: Literal["owner", "per_visitor"] = "owner"
    """http only, for a server that asks for an OAuth sign-in: the owner signs the host in once
    and every visitor's calls carry that token (`owner`), or each visitor session signs in with
    its own account, asked by a URL elicitation, and its calls carry only its own token
    (`per_visitor`; needs `instances: per_session`; the owner's sign-in then serves only the
    owner's context, the tool lists among it)."""

    def reachable_hosts(self) -> tuple[str, ...]:
        """The hosts an http transport's requests may go to: `allowed_hosts`, else the url's."""
        if self.allowed_hosts:
            return self.allowed_hosts
        host = url_host(self.url) if self.url is not None else None
        return (host,) if host is not None else ()

    @model_validator(mode="after")
    def _fits_kind(self) -> Self:
        if self.kind == "stdio":
            if self.command is None:
                raise problem("command", "required for a stdio transport")
            if self.url is not None:
                raise problem("url", "only an http transport takes a url")
            for name in self.env_from_config:
                if name in self.env:
                    raise problem(f"env_from_config.{name}", f"{name} is set in env too")
            for name in ("headers", "headers_from_config", "timeout_s", "allowed_hosts", "allow_private", "sign_in"):
                if name in self.model_fields_set:
                    raise problem(name, f"only an http transport takes {name}")
            return self
        if self.url is None:
            raise problem("url", "required for an http transport")
        for name in ("command", "args", "env", "sandbox", "env_from_config"):
            if name in self.model_fields_set:
                raise problem(name, f"an http transport takes no {name}")
        for name in self.headers_from_config:
            if name.casefold() in {h.casefold() for h in self.headers}:
                raise problem(f"headers_from_config.{name}", f"{name} is set in headers too")
        host = url_host(self.url)
        if host is None:
            raise problem("url", "has no host")
        if self.allowed_hosts and host not in self.allowed_hosts:
            raise problem("url", f"its host {shown(host)} is not in allowed_hosts")
        return self
