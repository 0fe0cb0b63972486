"""A ``tool`` result without ``name`` (standard clients send none; stored conversations of
earlier versions have none) is rendered with the name of the call its ``tool_call_id``
answers (the generic form here: ChatML shows no tools, and writes the tool's name into the
result; issue 27, item 7)."""

from __future__ import annotations

import json

from app.engine.chat_template import CHATML_TEMPLATE, ChatTemplate
from app.messages import ChatMessage, MessageToolCall

CALL = MessageToolCall("call_7", "get_weather", '{"city": "Paris"}')


def _history(name: str) -> list[dict[str, object]]:
    return [
        ChatMessage("user", "weather?").to_engine(),
        ChatMessage("assistant", "", tool_calls=(CALL,)).to_engine(),
        ChatMessage("tool", "sunny", tool_call_id="call_7", name=name).to_engine(),
    ]


def test_the_generic_form_names_the_called_tool() -> None:
    template = ChatTemplate(CHATML_TEMPLATE, "", "<|im_end|>")
    prompt = template.render(_history(""), add_generation_prompt=True)
    response = {"tool_response": {"tool": "get_weather", "content": "sunny"}}
    assert json.dumps(response) in prompt
    assert prompt == template.render(_history("get_weather"), add_generation_prompt=True)
