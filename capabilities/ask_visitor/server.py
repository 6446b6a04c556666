"""ask_visitor: the agent asks the visitor one structured question.

When the visitor's client supports form elicitation, the question is put to the visitor
(the host passes it through to that visitor's client: a server→client request on
2025-11-25, an input round on 2026-07-28) and their answer is returned. Otherwise the tool
answers plainly with the question it would have asked, so the agent can put it to the
visitor in its own reply.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

from mcp_host_kit.visitor import elicit

mcp = MCPServer("ask_visitor", version="1", log_level="WARNING")


class Answer(BaseModel):
    answer: str = Field(description="The visitor's answer")


@mcp.tool()
async def ask_visitor(question: str, choices: list[str] | None = None, ctx: Context | None = None) -> dict[str, Any]:
    """Ask the visitor a question; optional `choices` lists the answers to pick from."""
    question = question.strip()[:500]
    options = [c.strip()[:100] for c in (choices or [])][:10]
    prompt = question if not options else f"{question} (choose one of: {', '.join(options)})"
    asked = await elicit(ctx, prompt, Answer) if ctx is not None else None
    if asked is None:
        return {"asked": False, "question": question, "choices": options, "answer": None}
    if asked.action == "accept" and isinstance(asked.data, Answer):
        return {"asked": True, "question": question, "answer": asked.data.answer}
    return {"asked": True, "question": question, "answer": None, "declined": True}


if __name__ == "__main__":
    mcp.run()
