"""The resources, resource template, prompts and completions the conformance suite reads.

Above: `server.py` wires these handlers into the low-level SDK `Server`. Texts and shapes
follow the scenario descriptions of `@modelcontextprotocol/conformance` 0.1.13.
"""

from __future__ import annotations

import json
import re
from typing import Any

import mcp.types as types
from mcp import MCPError
from mcp.server import ServerRequestContext
from media import PNG_BASE64

Context = ServerRequestContext[Any, Any]

STATIC_TEXT = "This is the content of the static text resource."
WATCHED_TEXT = "Watched resource content"
TEMPLATE = "test://template/{id}/data"
_TEMPLATE_URI = re.compile(r"^test://template/(?P<id>[^/]+)/data$")

RESOURCES = [
    types.Resource(
        uri="test://static-text", name="static-text", description="A static text resource", mime_type="text/plain"
    ),
    types.Resource(
        uri="test://static-binary", name="static-binary", description="A static PNG image", mime_type="image/png"
    ),
    types.Resource(
        uri="test://watched-resource",
        name="watched-resource",
        description="A resource a client can subscribe to",
        mime_type="text/plain",
    ),
]
TEMPLATES = [
    types.ResourceTemplate(
        uri_template=TEMPLATE,
        name="template-data",
        description="Data for one id, substituted into the URI",
        mime_type="application/json",
    )
]


def _argument(name: str, description: str) -> types.PromptArgument:
    return types.PromptArgument(name=name, description=description, required=True)


PROMPTS = [
    types.Prompt(name="test_simple_prompt", description="A simple prompt without arguments"),
    types.Prompt(
        name="test_prompt_with_arguments",
        description="A prompt with two required arguments",
        arguments=[_argument("arg1", "First test argument"), _argument("arg2", "Second test argument")],
    ),
    types.Prompt(
        name="test_prompt_with_embedded_resource",
        description="A prompt that embeds a resource",
        arguments=[_argument("resourceUri", "URI of the resource to embed")],
    ),
    types.Prompt(name="test_prompt_with_image", description="A prompt that carries an image"),
]

# Completion values per argument name; the suite only needs a well-formed answer.
_COMPLETIONS = {"arg1": ["paris", "park", "party", "test", "testing"], "arg2": ["world", "work"], "id": ["123", "456"]}


async def list_resources(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListResourcesResult:
    return types.ListResourcesResult(resources=RESOURCES)


async def list_templates(
    ctx: Context, params: types.PaginatedRequestParams | None
) -> types.ListResourceTemplatesResult:
    return types.ListResourceTemplatesResult(resource_templates=TEMPLATES)


def _read(uri: str) -> types.TextResourceContents | types.BlobResourceContents:
    if uri == "test://static-text":
        return types.TextResourceContents(uri=uri, mime_type="text/plain", text=STATIC_TEXT)
    if uri == "test://static-binary":
        return types.BlobResourceContents(uri=uri, mime_type="image/png", blob=PNG_BASE64)
    if uri == "test://watched-resource":
        return types.TextResourceContents(uri=uri, mime_type="text/plain", text=WATCHED_TEXT)
    match = _TEMPLATE_URI.match(uri)
    if match:
        data = {"id": match["id"], "templateTest": True, "data": f"Data for ID: {match['id']}"}
        return types.TextResourceContents(uri=uri, mime_type="application/json", text=json.dumps(data))
    raise MCPError(types.INVALID_PARAMS, f"Unknown resource: {uri}")


async def read_resource(ctx: Context, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    return types.ReadResourceResult(contents=[_read(str(params.uri))])


async def subscribe(ctx: Context, params: types.SubscribeRequestParams) -> types.EmptyResult:
    _read(str(params.uri))  # an unknown URI is refused
    return types.EmptyResult()


async def unsubscribe(ctx: Context, params: types.UnsubscribeRequestParams) -> types.EmptyResult:
    return types.EmptyResult()


async def list_prompts(ctx: Context, params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
    return types.ListPromptsResult(prompts=PROMPTS)


def _user(content: types.TextContent | types.ImageContent | types.EmbeddedResource) -> types.PromptMessage:
    return types.PromptMessage(role="user", content=content)


def _messages(name: str, arguments: dict[str, str]) -> list[types.PromptMessage]:
    if name == "test_simple_prompt":
        return [_user(types.TextContent(type="text", text="This is a simple prompt for testing."))]
    if name == "test_prompt_with_arguments":
        text = f"Prompt with arguments: arg1='{arguments['arg1']}', arg2='{arguments['arg2']}'"
        return [_user(types.TextContent(type="text", text=text))]
    if name == "test_prompt_with_embedded_resource":
        resource = types.TextResourceContents(
            uri=arguments["resourceUri"], mime_type="text/plain", text="Embedded resource content for testing."
        )
        return [
            _user(types.EmbeddedResource(type="resource", resource=resource)),
            _user(types.TextContent(type="text", text="Please process the embedded resource above.")),
        ]
    if name == "test_prompt_with_image":
        return [
            _user(types.ImageContent(type="image", data=PNG_BASE64, mime_type="image/png")),
            _user(types.TextContent(type="text", text="Please analyze the image above.")),
        ]
    raise MCPError(types.INVALID_PARAMS, f"Unknown prompt: {name}")


async def get_prompt(ctx: Context, params: types.GetPromptRequestParams) -> types.GetPromptResult:
    declared = {p.name: p for p in PROMPTS}.get(params.name)
    arguments = dict(params.arguments or {})
    missing = [a.name for a in (declared.arguments or []) if a.name not in arguments] if declared else []
    if missing:
        raise MCPError(types.INVALID_PARAMS, f"Missing prompt arguments: {', '.join(missing)}")
    messages = _messages(params.name, arguments)
    return types.GetPromptResult(description=declared.description if declared else None, messages=messages)


async def complete(ctx: Context, params: types.CompleteRequestParams) -> types.CompleteResult:
    prefix = params.argument.value
    values = [v for v in _COMPLETIONS.get(params.argument.name, []) if v.startswith(prefix)]
    return types.CompleteResult(completion=types.Completion(values=values, total=len(values), has_more=False))
