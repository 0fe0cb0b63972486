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
from app.engine.tool_calls.formats import (
    SYNTAXES,
    ToolCallFormat,
    detect_tool_format,
    template_declares_tools,
)
from app.engine.tool_calls.parser import ToolCallParser, new_call_id
from app.engine.tool_calls.render import CallText, render_calls
from app.engine.tool_calls.specs import ToolSpec, ToolSpecError, check_arguments, tool_specs
from app.engine.tool_calls.stream import StreamingToolParser, new_parser

__all__ = [
    "SYNTAXES",
    "ArgumentsDelta",
    "CallStarted",
    "CallText",
    "ParseResult",
    "ReasoningDelta",
    "StreamEvent",
    "StreamingToolParser",
    "TextDelta",
    "ToolCall",
    "ToolCallFormat",
    "ToolCallParser",
    "ToolSpec",
    "ToolSpecError",
    "check_arguments",
    "detect_tool_format",
    "new_call_id",
    "new_parser",
    "render_calls",
    "template_declares_tools",
    "tool_specs",
]
