"""The exception tree's two mappings (a tool result, a JSON-RPC error) and the rules that keep
every door on them: every exception class of the host roots in `HostError`, an `InternalError`
is opaque at every mapping, no JSON-RPC code written outside `mcp_host.errors`, no private SDK
import."""

from __future__ import annotations

import importlib
import inspect
import logging
import pkgutil
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import asyncpg
import httpx2
import mcp.types as types
import pytest
from inline_snapshot import snapshot
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import mcp_host
import owner_console
import owner_facade
from mcp_host.edge import REST_ERRORS
from mcp_host.errors import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    OPAQUE,
    RESOURCE_NOT_FOUND,
    AnswerTooLarge,
    CallTimeout,
    DatabaseUnavailable,
    Denied,
    Held,
    HostError,
    InternalError,
    InvalidArguments,
    QuotaExhausted,
    TransportFailure,
    Unavailable,
    Unconfigured,
    UnknownTool,
    at_boundary,
    error_result,
    explained,
    rpc_error,
    tool_error,
)
from mcp_host_kit.contract import ERROR_KEY, QUOTA_EXHAUSTED, Refusal, refusal_of

HOST_ERRORS = [
    Denied("d"),
    Held("h"),
    QuotaExhausted("q"),
    Unconfigured("c"),
    UnknownTool("u"),
    InvalidArguments("i"),
    CallTimeout("t"),
    Unavailable("a"),
    DatabaseUnavailable(),
    TransportFailure("x"),
    AnswerTooLarge("x"),
]


def test_a_refusal_is_an_error_result_with_code_and_message_as_text_meta_and_structure() -> None:
    assert error_result("denied", "no").model_dump(by_alias=True, exclude_none=True) == snapshot(
        {
            "_meta": {"mcp-host/error": {"code": "denied", "message": "no"}},
            "content": [{"type": "text", "text": "denied: no"}],
            "structuredContent": {"code": "denied", "message": "no"},
            "isError": True,
            "resultType": "complete",
        }
    )


def test_a_refusal_for_a_tool_with_an_output_schema_leaves_structured_content_out() -> None:
    assert error_result("held", "wait", structured=False).model_dump(by_alias=True, exclude_none=True) == snapshot(
        {
            "_meta": {"mcp-host/error": {"code": "held", "message": "wait"}},
            "content": [{"type": "text", "text": "held: wait"}],
            "isError": True,
            "resultType": "complete",
        }
    )
    assert tool_error(Held("wait"), structured=False) == error_result("held", "wait", structured=False)


@pytest.mark.parametrize("structured", [True, False])
def test_the_code_reads_back_from_meta_whether_or_not_it_is_structured(structured: bool) -> None:
    refusal = error_result(QUOTA_EXHAUSTED, "none left", structured=structured)

    assert refusal_of(refusal) == Refusal(code=QUOTA_EXHAUSTED, message="none left")
    assert (refusal.meta or {})[ERROR_KEY] == {"code": QUOTA_EXHAUSTED, "message": "none left"}


def test_a_plugins_structured_refusal_reads_back_and_a_success_is_no_refusal() -> None:
    plugin = types.CallToolResult(content=[], structured_content={"code": "not_found", "message": "no"}, is_error=True)
    success = types.CallToolResult(content=[], structured_content={"code": "x", "message": "y"})
    shapeless = types.CallToolResult(content=[], structured_content={"code": 3}, is_error=True)

    assert refusal_of(plugin) == Refusal(code="not_found", message="no")
    assert (refusal_of(success), refusal_of(shapeless)) == (None, None)


@pytest.mark.parametrize("exc", HOST_ERRORS, ids=lambda e: type(e).__name__)
def test_a_host_error_becomes_a_tool_result_with_its_own_code_and_message(exc: HostError) -> None:
    assert tool_error(exc) == error_result(exc.code, exc.message)


def test_the_codes_are_designs_vocabulary() -> None:
    assert [e.code for e in HOST_ERRORS] == snapshot(
        [
            "denied",
            "held",
            "quota_exhausted",
            "unconfigured",
            "unknown",
            "invalid_arguments",
            "timeout",
            "unavailable",
            "unavailable",
            "transport",
            "unavailable",
        ]
    )


@pytest.mark.parametrize("exc", [RuntimeError("secret /etc/path"), KeyError("secret"), ValueError("secret")])
def test_anything_else_is_unavailable_with_an_opaque_message_never_its_text(exc: Exception) -> None:
    assert tool_error(exc) == error_result("unavailable", OPAQUE)
    assert tool_error(exc, "the op failed") == error_result("unavailable", "the op failed")
    assert rpc_error(exc, "prompts/get failed").error == types.ErrorData(
        code=INTERNAL_ERROR, message="prompts/get failed"
    )


def test_an_internal_error_is_answered_as_an_unknown_exception_never_with_its_message() -> None:
    exc = InternalError("secret: /srv/data/postgres refuses fsync = off")

    assert exc.code == "unavailable"
    assert explained(exc) is None
    assert tool_error(exc) == error_result("unavailable", OPAQUE)
    assert tool_error(exc, "the op failed") == error_result("unavailable", "the op failed")
    assert rpc_error(exc, "prompts/get failed").error == types.ErrorData(
        code=INTERNAL_ERROR, message="prompts/get failed"
    )
    assert rpc_error(exc, "resources/read failed", not_found=RESOURCE_NOT_FOUND).error == types.ErrorData(
        code=INTERNAL_ERROR, message="resources/read failed"
    )


@pytest.mark.parametrize("exc", HOST_ERRORS, ids=lambda e: type(e).__name__)
def test_every_other_host_error_is_explained_as_itself(exc: HostError) -> None:
    assert explained(exc) is exc


@pytest.mark.anyio
async def test_the_rest_handler_leaves_an_internal_error_to_starlettes_500_without_its_text() -> None:
    async def fail(request: Request) -> Response:
        raise InternalError("secret: /srv/data/postgres refuses fsync = off")

    app = Starlette(routes=[Route("/x", fail, methods=["POST"])], exception_handlers=REST_ERRORS)
    transport = httpx2.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx2.AsyncClient(transport=transport, base_url="http://t") as http:
        response = await http.post("/x")
    assert (response.status_code, response.text) == (500, "Internal Server Error")


def _modules(package: ModuleType) -> list[ModuleType]:
    names = [info.name for info in pkgutil.walk_packages(package.__path__, f"{package.__name__}.")]
    return [package, *(importlib.import_module(name) for name in names)]


def test_every_exception_class_of_the_host_roots_in_host_error() -> None:
    defined = {
        obj
        for package in (mcp_host, owner_facade, owner_console)
        for module in _modules(package)
        for obj in vars(module).values()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
    }
    assert len(defined) > 20  # the walk found the tree and the classes beside the modules that raise them
    assert sorted(f"{c.__module__}.{c.__qualname__}" for c in defined if not issubclass(c, HostError)) == []


def test_a_json_rpc_error_says_not_found_invalid_params_or_internal() -> None:
    def pair(exc: Exception, **kw: int) -> tuple[int, str]:
        error = rpc_error(exc, "opaque", **kw)
        return error.code, error.message

    assert pair(UnknownTool("no such prompt")) == (INVALID_PARAMS, "no such prompt")
    assert pair(UnknownTool("no such resource"), not_found=RESOURCE_NOT_FOUND) == (-32002, "no such resource")
    assert pair(InvalidArguments("bad"), not_found=RESOURCE_NOT_FOUND) == (INVALID_PARAMS, "bad")
    assert pair(CallTimeout("slow")) == (INTERNAL_ERROR, "slow")
    assert pair(DatabaseUnavailable()) == (INTERNAL_ERROR, DatabaseUnavailable().message)


# -- rules over the source -------------------------------------------------------------------------

SOURCES = sorted(
    path
    for package in (mcp_host, owner_facade, owner_console)
    for path in Path(str(package.__file__)).parent.rglob("*.py")
)
_JSONRPC_CODE = re.compile(r"-32[0-9]{3}\b")
_PRIVATE_SDK = re.compile(r"^\s*(from|import)\s+mcp(_types)?(\.\w+)*\._\w+", re.MULTILINE)


def test_no_json_rpc_code_is_written_outside_the_error_module() -> None:
    errors = Path(mcp_host.__file__).parent / "errors.py"
    found = [
        f"{path.name}:{n}: {line.strip()}"
        for path in SOURCES
        if path != errors
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if _JSONRPC_CODE.search(line)
    ]
    assert found == []


def test_nothing_imports_a_private_module_of_the_sdk() -> None:
    found = [f"{path.name}: {m.group(0).strip()}" for path in SOURCES for m in _PRIVATE_SDK.finditer(path.read_text())]
    assert found == []


@pytest.mark.parametrize(
    ("exc", "answer", "logged"),
    [
        (Denied("not yours"), Denied, [("INFO", "door: op -> denied: not yours", False)]),
        (asyncpg.exceptions.AdminShutdownError("terminating connection"), DatabaseUnavailable, []),
        (DatabaseUnavailable(), DatabaseUnavailable, []),
        (RuntimeError("secret detail"), None, [("ERROR", "door: op failed unexpectedly", True)]),
        (InternalError("schema detail"), None, [("ERROR", "door: op failed unexpectedly", True)]),
    ],
)
def test_every_doors_boundary_step_classifies_and_logs_once(
    caplog: pytest.LogCaptureFixture, exc: Exception, answer: type[HostError] | None, logged: list[Any]
) -> None:
    """A refusal is told and logged at info, an outage told and left to the database watch, anything
    else logged with its traceback and left to the door's opaque answer."""
    log = logging.getLogger("tests.boundary")
    with caplog.at_level(logging.DEBUG, logger="tests.boundary"):
        known = at_boundary(exc, log, "%s: %s", "door", "op")
    assert (type(known) if known is not None else None) is answer
    assert [(r.levelname, r.getMessage(), r.exc_info is not None) for r in caplog.records] == logged
