"""ask_visitor: the agent asks the visitor one structured question.

When the visitor's client supports form elicitation, the question is put to the visitor
and their answer is returned. Otherwise (for now) the tool answers plainly with the question
it would have asked, so the agent can put it to the visitor in its own reply. Full
pass-through of elicitation by the host comes with a later issue.
"""

from __future__ import annotations

from typing import Any

from mcp.server.mcpserver import Context, MCPServer
from pydantic import BaseModel, Field

mcp = MCPServer("ask_visitor", version="1", log_level="WARNING")


class Answer(BaseModel):
    answer: str = Field(description="The visitor's answer")


@mcp.tool()
async def ask_visitor(question: str, choices: list[str] | None = None, ctx: Context | None = None) -> dict[str, Any]:
    """Ask the visitor a question; optional `choices` lists the answers to pick from."""
    question = question.strip()[:500]
    options = [c.strip()[:100] for c in (choices or [])][:10]
    prompt = question if not options else f"{question} (choose one of: {', '.join(options)})"
    can_elicit = False
    if ctx is not None:
        caps = ctx.client_capabilities
        can_elicit = bool(caps and caps.elicitation)
    if ctx is not None and can_elicit:
        result = await ctx.elicit(prompt, Answer)
        if result.action == "accept" and result.data is not None:
            return {"asked": True, "question": question, "answer": result.data.answer}
        return {"asked": True, "question": question, "answer": None, "declined": True}
    return {"asked": False, "question": question, "choices": options, "answer": None}


if __name__ == "__main__":
    mcp.run()
