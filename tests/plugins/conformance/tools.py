"""The tools the MCP conformance suite's server scenarios call, as one table.

Above: `server.py` serves `TOOLS` through the low-level SDK `Server` (stdio under the host,
streamable HTTP for the direct baseline). Each entry is the tool's definition and an async
handler `(ctx, arguments) -> CallToolResult`; texts and shapes follow the scenario
descriptions of `@modelcontextprotocol/conformance` 0.1.13.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import mcp.types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from media import PNG_BASE64, WAV_BASE64

Context = ServerRequestContext[Any, Any]
Handler = Callable[[Context, dict[str, Any]], Awaitable[types.CallToolResult]]

NO_ARGUMENTS: dict[str, Any] = {"type": "object", "properties": {}}
STEP_S = 0.05


@dataclass(frozen=True)
class ToolEntry:
    tool: types.Tool
    handler: Handler


def _text(text: str, *, is_error: bool = False) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)], is_error=is_error)


def _string_arguments(*names: str) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {name: {"type": "string"} for name in names},
        "required": list(names),
    }


async def _log(ctx: Context, message: str) -> None:
    # related_request_id: on 2025-11-25 the message rides this call's own stream.
    await ctx.session.send_log_message("info", message, logger="conformance", related_request_id=ctx.request_id)


async def simple_text(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    return _text("This is a simple text response for testing.")


async def image_content(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")])


async def audio_content(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    return types.CallToolResult(content=[types.AudioContent(type="audio", data=WAV_BASE64, mime_type="audio/wav")])


async def embedded_resource(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://embedded-resource", mime_type="text/plain", text="This is an embedded resource content."
    )
    return types.CallToolResult(content=[types.EmbeddedResource(type="resource", resource=resource)])


async def multiple_content_types(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    resource = types.TextResourceContents(
        uri="test://mixed-content-resource", mime_type="application/json", text='{"test":"data","value":123}'
    )
    return types.CallToolResult(
        content=[
            types.TextContent(type="text", text="Multiple content types test:"),
            types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png"),
            types.EmbeddedResource(type="resource", resource=resource),
        ]
    )


async def tool_with_logging(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    await _log(ctx, "Tool execution started")
    await anyio.sleep(STEP_S)
    await _log(ctx, "Tool processing data")
    await anyio.sleep(STEP_S)
    await _log(ctx, "Tool execution completed")
    return _text("Tool with logging executed successfully")


async def tool_with_progress(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    for step in (0, 50, 100):
        await ctx.session.report_progress(step, 100, f"Completed step {step} of 100")
        if step < 100:
            await anyio.sleep(STEP_S)
    return _text("Tool with progress executed successfully")


async def error_handling(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    return _text("This tool intentionally returns an error for testing", is_error=True)


async def sampling(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    if not ctx.session.check_client_capability(types.ClientCapabilities(sampling=types.SamplingCapability())):
        return _text("The client does not support sampling", is_error=True)
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=str(arguments["prompt"])))
    try:
        result = await ctx.session.create_message(messages=[message], max_tokens=100, related_request_id=ctx.request_id)
    except MCPError as error:
        return _text(f"Sampling failed: {error.error.message}", is_error=True)
    answer = result.content.text if isinstance(result.content, types.TextContent) else "No response"
    return _text(f"LLM response: {answer}")


async def _elicit(ctx: Context, message: str, schema: dict[str, Any], label: str) -> types.CallToolResult:
    if not ctx.session.check_client_capability(types.ClientCapabilities(elicitation=types.ElicitationCapability())):
        return _text("The client does not support elicitation", is_error=True)
    try:
        result = await ctx.session.elicit_form(message, schema, related_request_id=ctx.request_id)
    except MCPError as error:
        return _text(f"Elicitation failed: {error.error.message}", is_error=True)
    return _text(f"{label}: action={result.action}, content={json.dumps(result.content or {})}")


async def elicitation(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "username": {"type": "string", "description": "User's response"},
            "email": {"type": "string", "description": "User's email address"},
        },
        "required": ["username", "email"],
    }
    return await _elicit(ctx, str(arguments["message"]), schema, "User response")


async def elicitation_sep1034_defaults(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "description": "User name", "default": "John Doe"},
            "age": {"type": "integer", "description": "User age", "default": 30},
            "score": {"type": "number", "description": "User score", "default": 95.5},
            "status": {
                "type": "string",
                "description": "User status",
                "enum": ["active", "inactive", "pending"],
                "default": "active",
            },
            "verified": {"type": "boolean", "description": "Verification status", "default": True},
        },
    }
    return await _elicit(ctx, "Please provide user information", schema, "Elicitation completed")


def _titled(*pairs: tuple[str, str]) -> list[dict[str, str]]:
    return [{"const": value, "title": title} for value, title in pairs]


async def elicitation_sep1330_enums(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    options = ["option1", "option2", "option3"]
    schema = {
        "type": "object",
        "properties": {
            "untitledSingle": {"type": "string", "enum": options},
            "titledSingle": {
                "type": "string",
                "oneOf": _titled(("value1", "First Option"), ("value2", "Second Option"), ("value3", "Third Option")),
            },
            "legacyEnum": {
                "type": "string",
                "enum": ["opt1", "opt2", "opt3"],
                "enumNames": ["Option One", "Option Two", "Option Three"],
            },
            "untitledMulti": {"type": "array", "items": {"type": "string", "enum": options}},
            "titledMulti": {
                "type": "array",
                "items": {
                    "anyOf": _titled(
                        ("value1", "First Choice"), ("value2", "Second Choice"), ("value3", "Third Choice")
                    )
                },
            },
        },
    }
    return await _elicit(ctx, "Please select values using different enum schema types", schema, "Elicitation completed")


async def json_schema_2020_12(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    return _text(f"Received: {json.dumps(arguments, sort_keys=True)}")


async def reconnection(ctx: Context, arguments: dict[str, Any]) -> types.CallToolResult:
    """Close this call's SSE stream mid-call (SEP-1699); only HTTP with an event store has one to close."""
    await _log(ctx, "Before disconnect")
    if ctx.close_sse_stream is not None:
        await ctx.close_sse_stream()
    await anyio.sleep(0.2)  # the client reconnects with Last-Event-ID meanwhile
    await _log(ctx, "After reconnect")
    return _text("Reconnection test completed")


JSON_SCHEMA_2020_12 = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "$defs": {"address": {"type": "object", "properties": {"street": {"type": "string"}, "city": {"type": "string"}}}},
    "properties": {"name": {"type": "string"}, "address": {"$ref": "#/$defs/address"}},
    "additionalProperties": False,
}


def _entry(name: str, description: str, handler: Handler, schema: dict[str, Any] = NO_ARGUMENTS) -> ToolEntry:
    return ToolEntry(types.Tool(name=name, description=description, input_schema=schema), handler)


TOOLS: dict[str, ToolEntry] = {
    entry.tool.name: entry
    for entry in [
        _entry("test_simple_text", "Returns simple text content", simple_text),
        _entry("test_image_content", "Returns image content", image_content),
        _entry("test_audio_content", "Returns audio content", audio_content),
        _entry("test_embedded_resource", "Returns an embedded resource", embedded_resource),
        _entry("test_multiple_content_types", "Returns text, image and resource content", multiple_content_types),
        _entry("test_tool_with_logging", "Sends three log messages while it runs", tool_with_logging),
        _entry("test_tool_with_progress", "Reports progress 0, 50 and 100 of 100", tool_with_progress),
        _entry("test_error_handling", "Always returns an error result", error_handling),
        _entry("test_sampling", "Asks the client's model to answer a prompt", sampling, _string_arguments("prompt")),
        _entry("test_elicitation", "Asks the user for a username and email", elicitation, _string_arguments("message")),
        _entry(
            "test_elicitation_sep1034_defaults", "Elicits with defaults for every type", elicitation_sep1034_defaults
        ),
        _entry("test_elicitation_sep1330_enums", "Elicits with every enum schema form", elicitation_sep1330_enums),
        _entry(
            "json_schema_2020_12_tool",
            "Tool with JSON Schema 2020-12 features",
            json_schema_2020_12,
            JSON_SCHEMA_2020_12,
        ),
        _entry("test_reconnection", "Closes its SSE stream mid-call, then answers", reconnection),
    ]
}
