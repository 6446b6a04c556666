"""Reading `manifest.yaml`: PyYAML's SafeLoader made strict, for the host and the kit alike.

Above: the host's manifest loader (`mcp_host.plugins.manifest`, which raises a `YamlProblem`
as its `ManifestError`) and the kit's standalone manifest reader (`mcp_host_kit.manifest`).
Below: PyYAML, imported only when a file is read — a plugin under the host reads no file and
needs the MCP SDK alone.

Scalars resolve as in YAML 1.2's core schema (`no` stays a string, `10:30` stays a string,
not the integer 630); aliases are refused (no alias bombs), and so are duplicate keys and any
tag that is not plain JSON (no timestamps, no binary, no Python objects).
"""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any

__all__ = ["MANIFEST_NAME", "MAX_MANIFEST_BYTES", "YamlProblem", "loc_part", "read_yaml"]

MANIFEST_NAME = "manifest.yaml"
MAX_MANIFEST_BYTES = 1024 * 1024

# (tag, pattern, possible first characters); "" is the empty scalar.
_RESOLVERS: tuple[tuple[str, str, list[str]], ...] = (
    ("tag:yaml.org,2002:bool", r"true|True|TRUE|false|False|FALSE", list("tTfF")),
    ("tag:yaml.org,2002:int", r"[-+]?(?:0|[1-9][0-9]*)", list("-+0123456789")),
    (
        "tag:yaml.org,2002:float",
        r"[-+]?(?:[0-9]+\.[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+[eE][-+]?[0-9]+",
        list("-+0123456789."),
    ),
    ("tag:yaml.org,2002:null", r"~|null|Null|NULL|", ["~", "n", "N", ""]),
)
_PLAIN_TAGS = frozenset(f"tag:yaml.org,2002:{name}" for name in ("str", "int", "float", "bool", "null", "seq", "map"))
_PLAIN_LOC_RE = re.compile(r"\A[A-Za-z0-9_.$-]{1,64}\Z")


class YamlProblem(Exception):
    """Why a YAML file was not read: `field` is the dotted location ("" for the whole file),
    `problem` a message safe to print."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}" if field else problem)
        self.field = field
        self.problem = problem


def read_yaml(path: Path, *, max_bytes: int) -> object:
    """The parsed YAML document of `path` (None when it is empty).

    Raises OSError when the file cannot be read, `YamlProblem` when it is larger than
    `max_bytes`, not UTF-8 or not YAML this loader accepts, and RuntimeError when PyYAML is
    not installed.
    """
    try:
        import yaml
    except ImportError:  # pragma: no cover - PyYAML ships with mcp-host
        raise RuntimeError("reading manifest.yaml needs PyYAML: pip install pyyaml") from None
    with path.open("rb") as file:
        raw = file.read(max_bytes + 1)
    if len(raw) > max_bytes:
        raise YamlProblem("", f"larger than {max_bytes} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlProblem("", f"not UTF-8 (byte {exc.start})") from None
    try:
        return _parse(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        raise YamlProblem("", f"not valid YAML: {_printable(exc.problem or '')}{where}") from None
    except yaml.YAMLError:
        raise YamlProblem("", "not valid YAML") from None
    except RecursionError:
        raise YamlProblem("", "nested too deeply") from None


@functools.cache
def _loader() -> type[Any]:
    """SafeLoader with YAML 1.2 scalars, no aliases and no timestamps."""
    import yaml

    class Loader(yaml.SafeLoader):
        yaml_implicit_resolvers: dict[Any, Any] = {}  # filled below, instead of SafeLoader's YAML 1.1 set

        def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()  # type: ignore[no-untyped-call]
                raise yaml.composer.ComposerError(None, None, "aliases are not allowed", event.start_mark)
            return super().compose_node(parent, index)

    for tag, pattern, first in _RESOLVERS:
        Loader.add_implicit_resolver(tag, re.compile(rf"\A(?:{pattern})\Z"), first)
    return Loader


def _parse(text: str) -> object:
    loader = _loader()(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        problem = _node_problem(node)
        if problem is not None:
            field, message, bad = problem
            raise YamlProblem(field, f"{message} (line {bad.start_mark.line + 1})")
        return loader.construct_document(node)
    finally:
        loader.dispose()


def _key_problem(node: Any, where: str) -> tuple[str, str, Any] | None:
    seen: set[tuple[str, str]] = set()
    for key_node, _ in node.value:
        identity = (key_node.tag, str(key_node.value))
        if identity in seen:
            return f"{where}{loc_part(key_node.value)}", f"duplicate key {_shown(key_node.value)}", key_node
        seen.add(identity)
    return None


def _node_problem(root: Any) -> tuple[str, str, Any] | None:
    """(dotted location, problem, node) of the first repeated key or non-JSON tag, in document order."""
    import yaml

    stack: list[tuple[Any, str]] = [(root, "")]
    while stack:
        node, where = stack.pop()
        if node.tag not in _PLAIN_TAGS:
            return where.rstrip("."), f"tag {_shown(node.tag)} is not allowed", node
        children: list[tuple[Any, str]] = []
        if isinstance(node, yaml.MappingNode):
            problem = _key_problem(node, where)
            if problem is not None:
                return problem
            children = [(value, f"{where}{loc_part(key.value)}.") for key, value in node.value]
        elif isinstance(node, yaml.SequenceNode):
            children = [(item, f"{where}{index}.") for index, item in enumerate(node.value)]
        stack.extend(reversed(children))
    return None


def loc_part(part: object) -> str:
    """One part of a dotted location: plain names as they are, anything else as a short literal."""
    if isinstance(part, int) or (isinstance(part, str) and _PLAIN_LOC_RE.match(part)):
        return str(part)
    return _shown(part)


def _shown(value: object, limit: int = 40) -> str:
    # As mcp_host.plugins.text_safety.shown: a short, escaped literal that is safe to print.
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _printable(text: str, limit: int = 200) -> str:
    # As mcp_host.plugins.text_safety.printable: cut, with anything unprintable escaped.
    cut = text if len(text) <= limit else text[: limit - 1] + "…"
    return "".join(char if char.isprintable() else repr(char)[1:-1] for char in cut)
