"""An earlier assistant turn renders as llama.cpp renders it (issue 27, item 3).

llama-server and llama-cli pass ``preserve_reasoning=true`` by default, which sets
``preserve_thinking``/``drop_thinking``/``clear_thinking``/``truncate_history_thinking``
for the template: DeepSeek V4 then writes an earlier reply as ``<think></think>answer``
(its own default, ``drop_thinking=true``, writes ``</think>answer``). Checked on the text
here, and every shared template against llama.cpp's own llama-server (``/apply-template``
with the same template file): before, 68 of 70 matched (the two DeepSeek V4), and 63 of
70 with the earlier reply's reasoning (also GLM-4.7, Nemotron 3, LFM2.5 and the two
Ministral 3 handler templates).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from app.engine import Engine
from tests.remote.llama_server_process import start_llama_server
from tests.support.settings import small_settings

pytestmark = pytest.mark.timeout(300)

TEMPLATES = Path(__file__).resolve().parents[1] / "data" / "chat-templates"
DEEPSEEK_V4 = ["deepseek-ai-DeepSeek-V4", "deepseek-ai-DeepSeek-V4-Flash-0731"]
HISTORY = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Hello there."},
    {"role": "assistant", "content": "Hi! How can I help?"},
    {"role": "user", "content": "Name three colors."},
]

# The earlier reply with its reasoning: llama-server keeps it (preserve_reasoning) and hands
# it over as ``thinking`` (gpt-oss, LFM2/LFM2.5) or as a thinking block (Ministral 3).
THOUGHT = [
    *HISTORY[:2],
    {**HISTORY[2], "reasoning_content": "The user greets me."},
    *HISTORY[3:],
]


@pytest.fixture(scope="module")
def engine(tiny_model: Path) -> Iterator[Engine]:
    engine = Engine.open(tiny_model, small_settings(n_seq_max=1))
    yield engine
    engine.close()


@pytest.mark.parametrize("name", DEEPSEEK_V4)
def test_earlier_reply_keeps_an_empty_reasoning_block(engine: Engine, name: str) -> None:
    engine.set_chat_template(str(TEMPLATES / f"{name}.jinja"))
    prompt = engine.render_chat(list(HISTORY))
    assert "<｜Assistant｜><think></think>Hi! How can I help?<｜end▁of▁sentence｜>" in prompt
    assert "<｜Assistant｜></think>" not in prompt
    assert prompt.endswith("<｜User｜>Name three colors.<｜Assistant｜><think>")


@pytest.mark.parametrize("path", sorted(TEMPLATES.glob("*.jinja")), ids=lambda p: p.stem)
def test_a_conversation_renders_as_llama_server_renders_it(
    engine: Engine, tiny_model: Path, path: Path
) -> None:
    """Every shared template, a system prompt and an earlier turn, without and with its
    reasoning: the text llama-server's ``/apply-template`` makes with the same template file
    and model (about 0.7 s each)."""
    proc: subprocess.Popen[bytes]
    proc, url = start_llama_server(
        tiny_model, "--parallel", "1", "--jinja", "--chat-template-file", str(path)
    )
    try:
        answers = [
            httpx2.post(f"{url}/apply-template", json={"messages": history}, timeout=30)
            for history in (HISTORY, THOUGHT)
        ]
    finally:
        proc.terminate()
        proc.wait(30)
    engine.set_chat_template(str(path))
    for history, answer in zip((HISTORY, THOUGHT), answers, strict=True):
        assert answer.status_code == 200, answer.text
        assert engine.render_chat(list(history)) == answer.json()["prompt"]
