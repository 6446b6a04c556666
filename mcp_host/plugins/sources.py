"""What `mcp-host plugin add SOURCE` may install: the SOURCE grammars and the typed sources.

Above: `install` (which installs npm and PyPI sources) and the command line. Below: nothing but
`re`. The grammars are strict and anchored: a SOURCE that does not match one of them is refused
with one sentence (`InvalidArguments`) before anything runs, so no option, shell word, URL or
path ever reaches npm or pip as a package name.

- `npm:<package>[@<version>]`: a package name as npm spells it (`@scope/name` or `name`, lower
  case, at most 214 characters), a version or dist-tag of letters, digits and `.+-_`.
- `pypi:<package>[==<version>]`: a distribution name (PEP 508: letters, digits and `._-`, a
  letter or digit at both ends), a PEP 440 version.
- a path ending `.mcpb` (an MCP Bundle) or `.json` (an MCP registry entry: `server.json`,
  `time.server.json`, any name): recognised here by its name alone, installed by
  `install_bundle` (unpacked, or its npm or PyPI package), which reads the file and refuses one
  that is not a registry entry in one sentence.
- `https://<host>[:port]/<path>`: a remote MCP server (streamable HTTP), written as a manifest
  with an http transport by `install.install_remote`; `http://` only to a loopback host
  (`127.0.0.1`, `[::1]`, `localhost`). No user or password in the URL, no fragment, printable
  ASCII, at most 2048 characters; never a link-local or cloud-metadata host (`169.254.169.254`,
  `metadata.google.internal`: `addresses.metadata_host`). The manifest lets the host reach the
  url's host at public addresses only, until the owner names it in `transport.allow_private`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from mcp_host.errors import InvalidArguments

from .addresses import metadata_host
from .text_safety import printable

__all__ = [
    "AddSource",
    "BundleSource",
    "NpmSource",
    "PypiSource",
    "RegistryEntrySource",
    "RemoteSource",
    "Source",
    "names_a_file",
    "parse_add_source",
    "parse_source",
    "remote_id_words",
]

_NPM_WORD = r"[a-z0-9][a-z0-9._~-]*"
_NPM_NAME_RE = re.compile(rf"\A(?=.{{1,214}}\Z)(?:@{_NPM_WORD}/)?{_NPM_WORD}\Z")
_NPM_VERSION_RE = re.compile(r"\A[0-9A-Za-z][0-9A-Za-z.+_-]{0,63}\Z")
_PYPI_NAME_RE = re.compile(r"\A(?=.{1,100}\Z)[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?\Z")
_PYPI_VERSION_RE = re.compile(r"\A[0-9][0-9A-Za-z.+!_-]{0,63}\Z")
_MAX_PATH = 4096


@dataclass(frozen=True)
class NpmSource:
    """An npm package, at `version` (a version or dist-tag) or npm's latest."""

    package: str
    version: str | None = None

    @property
    def spec(self) -> str:
        """What `npm install` is given."""
        return f"{self.package}@{self.version}" if self.version else self.package

    def __str__(self) -> str:
        return f"npm:{self.spec}"


@dataclass(frozen=True)
class PypiSource:
    """A PyPI distribution, at `version` or pip's newest."""

    package: str
    version: str | None = None

    @property
    def spec(self) -> str:
        """What `pip install` is given."""
        return f"{self.package}=={self.version}" if self.version else self.package

    def __str__(self) -> str:
        return f"pypi:{self.spec}"


@dataclass(frozen=True)
class BundleSource:
    """An MCP Bundle file (`.mcpb`)."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class RegistryEntrySource:
    """An MCP registry entry (`server.json`)."""

    path: Path

    def __str__(self) -> str:
        return str(self.path)


@dataclass(frozen=True)
class RemoteSource:
    """A remote MCP server's streamable-HTTP endpoint."""

    url: str
    host: str
    """The url's host, lower-cased (an IPv6 address in [brackets])."""

    def __str__(self) -> str:
        return self.url


Source = NpmSource | PypiSource | BundleSource | RegistryEntrySource
"""What a plugin folder is installed (and upgraded) from."""
AddSource = Source | RemoteSource
"""What `plugin add` takes: a source to install, or a remote server to write a manifest for."""
_LOOPBACK_NAMES = ("localhost",)
_MAX_URL = 2048


def parse_source(text: str) -> Source:
    """The source `text` names; `InvalidArguments` (one sentence) when it names none."""
    if text.startswith("npm:"):
        return _npm(text[4:])
    if text.startswith("pypi:"):
        return _pypi(text[5:])
    if names_a_file(text):
        if len(text) > _MAX_PATH or not text.isprintable():
            raise InvalidArguments("the source path is too long or holds unprintable characters")
        path = Path(text)
        return BundleSource(path) if text.endswith(".mcpb") else RegistryEntrySource(path)
    raise InvalidArguments(
        f"{printable(text, 80)!r} is not a source: use npm:<package>[@<version>], pypi:<package>[==<version>],"
        " a path to an .mcpb bundle, a path to a registry entry (server.json, x.server.json) or an https:// URL of"
        " a remote MCP server"
    )


def names_a_file(text: str) -> bool:
    """Whether `text` names a file source by its name: a path ending `.mcpb` or `.json` (and
    more than the extension)."""
    name = text.rpartition("/")[2]
    return name.endswith((".mcpb", ".json")) and name not in (".mcpb", ".json")


def parse_add_source(text: str) -> AddSource:
    """What `plugin add` is given: `parse_source`, or a remote server's URL (`RemoteSource`)."""
    if text.startswith(("https://", "http://")):
        return _remote(text)
    return parse_source(text)


def _remote(text: str) -> RemoteSource:
    if len(text) > _MAX_URL or not text.isascii() or not text.isprintable() or " " in text:
        raise InvalidArguments("a remote server's URL is printable ASCII without spaces, at most 2048 characters")
    try:
        parts = urlsplit(text)
        host = parts.hostname
        parts.port  # noqa: B018 - a malformed port raises here
    except ValueError:
        raise InvalidArguments(f"{printable(text, 80)!r} is not a URL") from None
    if not host:
        raise InvalidArguments(f"{printable(text, 80)!r} names no host")
    if parts.username is not None or parts.password is not None:
        raise InvalidArguments(
            "a remote server's URL carries no user or password; the owner sets credentials as config"
        )
    if parts.fragment:
        raise InvalidArguments("a remote server's URL has no #fragment")
    host = host.casefold()
    if metadata_host(host):
        raise InvalidArguments(
            f"{printable(host, 80)} is a link-local or cloud-metadata address; a remote plugin cannot be added there"
        )
    if parts.scheme == "http" and not _loopback(host):
        raise InvalidArguments("an http:// source must be a loopback host (127.0.0.1, [::1], localhost); use https://")
    return RemoteSource(text, f"[{host}]" if ":" in host else host)


def _loopback(host: str) -> bool:
    if host in _LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def remote_id_words(source: RemoteSource) -> list[str]:
    """The words of a remote plugin's default id: its host's labels (`mcp.example.com` →
    mcp, example, com; an address → ip_127_0_0_1)."""
    host = source.host.strip("[]")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        pass
    else:
        return ["ip_" + re.sub(r"[^0-9a-f]+", "_", host).strip("_")]
    words = []
    for label in host.split("."):
        word = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", label)).strip("_")
        if word:
            words.append(word if word[0].isalpha() else f"h{word}")
    return words


def _npm(rest: str) -> NpmSource:
    at = rest.find("@", 1)  # a scope's @ comes first
    package, version = (rest[:at], rest[at + 1 :]) if at > 0 else (rest, None)
    if not _NPM_NAME_RE.match(package):
        raise InvalidArguments(
            f"{printable(package, 80)!r} is not an npm package name (@scope/name or name: lower-case letters,"
            " digits and . _ ~ -)"
        )
    if version is not None and not _NPM_VERSION_RE.match(version):
        raise InvalidArguments(f"{printable(version, 80)!r} is not an npm version or tag (letters, digits and . + _ -)")
    return NpmSource(package, version)


def _pypi(rest: str) -> PypiSource:
    package, sep, version = rest.partition("==")
    if not _PYPI_NAME_RE.match(package):
        raise InvalidArguments(
            f"{printable(package, 80)!r} is not a PyPI package name (letters, digits and . _ -; pin with ==VERSION)"
        )
    if sep and not _PYPI_VERSION_RE.match(version):
        raise InvalidArguments(f"{printable(version, 80)!r} is not a PyPI version (e.g. 1.2.0)")
    return PypiSource(package, version if sep else None)


def plugin_id_words(source: NpmSource | PypiSource) -> list[str]:
    """The words of the default plugin id: the registry, then each part of the package name
    (`@modelcontextprotocol/server-memory` → npm, modelcontextprotocol, server_memory)."""
    registry = "npm" if isinstance(source, NpmSource) else "pypi"
    parts = source.package.lstrip("@").split("/")
    words = [registry]
    for part in parts:
        word = re.sub(r"_+", "_", re.sub(r"[^a-z0-9]", "_", part.lower())).strip("_")
        if not word:
            continue
        words.append(word if word[0].isalpha() else f"p{word}")
    return words
