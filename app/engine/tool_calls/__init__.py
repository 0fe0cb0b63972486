"""Tool calls: the families' syntaxes, the streaming parser, forced-call grammars."""

from app.engine.tool_calls.events import (
    ArgumentsDelta,
    CallStarted,
    ParseResult,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCall,
)
from app.engine.tool_calls.formats import SYNTAXES, ToolCallFormat, detect_tool_format, template_declares_tools
from app.engine.tool_calls.parser import ToolCallParser, new_call_id

__all__ = [
    "SYNTAXES",
    "ArgumentsDelta",
    "CallStarted",
    "ParseResult",
    "ReasoningDelta",
    "StreamEvent",
    "TextDelta",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallParser",
    "detect_tool_format",
    "new_call_id",
    "template_declares_tools",
]
