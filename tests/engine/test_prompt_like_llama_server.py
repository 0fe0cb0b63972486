"""The prompt is llama.cpp's prompt (issue 27, item 3), on the real SmolLM2.

SmolLM2's BOS text is ``<|im_start|>`` but its tokenizer adds no BOS token; its template
starts with that text as ChatML's first marker. llama.cpp strips a leading BOS text only
where the tokenizer adds BOS (``common_chat_template_direct_apply``); the app used to strip
it always, so its prompt began ``system\\nYou are...`` (33 tokens, llama-server 34) and the
greedy reply differed. The reference is llama.cpp's own llama-server on the same file:
its ``/apply-template`` and ``/tokenize`` routes, and its greedy reply compared with a fresh
run of the same shape here (one sequence, the prompt in one batch, then one token a step,
one thread on both sides, the same kernels: ``cpu_quirks.llama_server_flags``).
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from app.engine import Engine, SamplingParams
from app.engine.cpu_quirks import llama_server_flags
from tests.remote.llama_server_process import start_llama_server
from tests.support.serve_process import ServeProcess
from tests.support.settings import small_settings

pytestmark = pytest.mark.timeout(300)

MESSAGES = [{"role": "user", "content": "Name three colors."}]
N_REPLY = 24


@pytest.fixture(scope="module")
def engine(smollm2: Path) -> Iterator[Engine]:
    engine = Engine.open(smollm2, small_settings(n_seq_max=1, n_batch=64, n_ubatch=64))
    yield engine
    engine.close()


@pytest.fixture(scope="module")
def llama_server(smollm2: Path) -> Iterator[str]:
    proc: subprocess.Popen[bytes]
    proc, url = start_llama_server(
        smollm2, "--parallel", "1", "-c", "2048", "--jinja", *llama_server_flags()
    )
    yield url
    proc.terminate()
    proc.wait(30)


def test_smollm2_adds_no_bos_and_its_template_keeps_the_first_marker(engine: Engine) -> None:
    model = engine.model
    assert model is not None and not model.add_bos
    assert engine.model_info.bos_token == "<|im_start|>"
    prompt = engine.render_chat(list(MESSAGES))
    assert prompt.startswith("<|im_start|>system\nYou are")
    assert len(engine.tokenize(prompt)) == 34


def test_prompt_text_and_tokens_are_llama_servers(engine: Engine, llama_server: str) -> None:
    applied = httpx2.post(f"{llama_server}/apply-template", json={"messages": MESSAGES}, timeout=30)
    assert applied.status_code == 200, applied.text
    reference = applied.json()["prompt"]
    prompt = engine.render_chat(list(MESSAGES))
    assert prompt == reference
    tokenized = httpx2.post(
        f"{llama_server}/tokenize",
        json={"content": reference, "add_special": True, "parse_special": True},
        timeout=30,
    )
    assert tokenized.status_code == 200, tokenized.text
    reference_tokens = tokenized.json()["tokens"]
    assert len(reference_tokens) == 34
    assert engine.tokenize(prompt) == reference_tokens


def _greedy_reply(url: str) -> str:
    """A greedy chat reply from an OpenAI-compatible server; its prompt was 34 tokens."""
    answer = httpx2.post(
        f"{url}/v1/chat/completions",
        json={"messages": MESSAGES, "temperature": 0, "max_tokens": N_REPLY, "seed": 1},
        timeout=120,
    )
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["usage"]["prompt_tokens"] == 34
    return str(body["choices"][0]["message"]["content"])


def test_greedy_reply_is_llama_servers(engine: Engine, llama_server: str) -> None:
    """Compared with a fresh run of the same shape (module docstring), text for text."""
    reference = _greedy_reply(llama_server)
    key = engine.open_sequence()
    try:
        completion = engine.chat(
            list(MESSAGES), SamplingParams(temperature=0.0, max_tokens=N_REPLY), key=key
        )
    finally:
        engine.close_sequence(key)
    assert completion.n_prompt == 34
    assert completion.text == reference
    assert completion.text.strip(), "an empty reply would compare equal to nothing"


def test_bos_and_eos_texts_are_stripped_only_where_the_tokenizer_adds_them() -> None:
    from app.engine.chat_template import ChatTemplate

    source = "{{ bos_token }}{% for m in messages %}{{ m['content'] }}{% endfor %}{{ eos_token }}"
    hi = [{"role": "user", "content": "hi"}]
    assert ChatTemplate(source, "<s>", "</s>", add_bos=False).render(hi) == "<s>hi</s>"
    assert ChatTemplate(source, "<s>", "</s>", add_bos=True).render(hi) == "hi</s>"
    assert ChatTemplate(source, "<s>", "</s>", add_bos=True, add_eos=True).render(hi) == "hi"
    assert ChatTemplate(source, "<s>", "</s>", add_eos=True).render(hi, strip_bos=False) == (
        "<s>hi</s>"
    )


def test_serve_gives_llama_servers_prompt_and_reply(
    smollm2: Path, llama_server: str, tmp_path: Path
) -> None:
    """``serve`` renders through the same template: one request at a time, the same shape."""
    served = ServeProcess([str(smollm2), "--parallel", "1", "-t", "1"], tmp_path / "home")
    try:
        reply = _greedy_reply(served.url)
    finally:
        code, err = served.stop()
    assert code == 0, err
    assert reply == _greedy_reply(llama_server)
    assert reply.strip()
