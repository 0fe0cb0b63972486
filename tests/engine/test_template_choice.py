"""Which chat template a model gets and why, and that a reply stops at its end marker
(issue 20, item 1): a model without a template gets the one its vocabulary names, not
ChatML whose markers it cannot write as tokens."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import gguf
import numpy as np
import pytest

from app.engine import Engine, ModelSettings, SamplingParams
from app.engine.chat_template import ChatTemplate, TemplateSource
from app.engine.chat_template.choice import choose_builtin_choice, user_template
from app.engine.settings import SettingsError
from tests.support.gguf_models import add_llama_header, llama_tensor_shapes
from tests.support.settings import small_settings

_WORDS = "hello world the a model user more text yes no".split()


def gemma_vocabulary() -> tuple[list[str], list[float], list[int]]:
    """A Gemma-like vocabulary: <start_of_turn>/<end_of_turn> special tokens, an EOS that
    is <eos> (a base model's), no ChatML markers. Index 260 (the writer's EOS id) is <eos>."""
    tokens = ["<pad>", "<bos>", "<unk>"]
    types = [gguf.TokenType.CONTROL, gguf.TokenType.CONTROL, gguf.TokenType.UNKNOWN]
    tokens += [f"<0x{b:02X}>" for b in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += ["<start_of_turn>", "<eos>", "<end_of_turn>"]
    types += [gguf.TokenType.CONTROL] * 3
    for piece in ["▁", "\n", *("▁" + w for w in _WORDS), *_WORDS]:
        tokens.append(piece)
        types.append(gguf.TokenType.NORMAL)
    scores = [
        0.0 if t != gguf.TokenType.NORMAL else -100.0 + len(s)
        for s, t in zip(tokens, types, strict=True)
    ]
    assert tokens[260] == "<eos>"
    return tokens, scores, [int(t) for t in types]


def write_gemma_vocab_model(path: Path) -> Path:
    vocab = gemma_vocabulary()
    writer = gguf.GGUFWriter(str(path), "llama")
    add_llama_header(
        writer,
        name="tiny-base-no-template",
        n_ctx_train=2048,
        n_embd=64,
        n_layer=2,
        n_ff=128,
        n_head=4,
        n_head_kv=2,
        file_type=gguf.LlamaFileType.ALL_F32,
        vocab=vocab,
        chat_template=None,
    )
    rng = np.random.default_rng(0)
    for name, shape in llama_tensor_shapes(len(vocab[0]), 64, 4, 2, 2, 128):
        if len(shape) == 1:
            writer.add_tensor(name, np.ones(shape, np.float32))
        else:
            data = rng.standard_normal(shape) * 0.35 / np.sqrt(shape[-1]) * 8
            writer.add_tensor(name, data.astype(np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@pytest.fixture(scope="module")
def gemma_vocab_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gemma_vocab_model(tmp_path_factory.mktemp("template") / "base.gguf")


# The grammar makes the model write the ChatML end marker and a next turn as text.
_RUNS_ON = 'root ::= "hello world<|im_end|>\\n<|im_start|>user more text"'


def test_the_vocabulary_names_the_family() -> None:
    def vocab(*tokens: str) -> object:
        return set(tokens).__contains__

    cases = {
        ("<start_of_turn>", "<end_of_turn>"): "gemma",
        ("<|im_start|>", "<|im_end|>"): "chatml",
        ("<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"): "llama3",
        ("[INST]", "[/INST]"): "mistral-v3",
        ("[SYSTEM_PROMPT]", "[INST]", "[/INST]"): "mistral-v7",
        ("<|user|>", "<|assistant|>", "<|end|>"): "phi3",
        ("<|user|>", "<|assistant|>"): "zephyr",
    }
    for tokens, name in cases.items():
        choice = choose_builtin_choice(vocab(*tokens), "llama")  # type: ignore[arg-type]
        assert (choice.name, choice.source) == (name, TemplateSource.BUILTIN_BY_VOCABULARY)
        assert tokens[0] in choice.reason
    by_arch = choose_builtin_choice(vocab(), "gemma3")  # type: ignore[arg-type]
    assert (by_arch.name, by_arch.source) == ("gemma", TemplateSource.BUILTIN_BY_ARCHITECTURE)
    assert "gemma3" in by_arch.reason
    nothing = choose_builtin_choice(vocab(), "llama")  # type: ignore[arg-type]
    assert (nothing.name, nothing.source) == ("chatml", TemplateSource.BUILTIN_DEFAULT)
    assert "--chat-template" in nothing.reason


def test_every_bundled_template_renders_and_has_an_end_marker() -> None:
    from app.engine.chat_template import BUILTIN_TEMPLATES

    for name in BUILTIN_TEMPLATES:
        template = ChatTemplate.for_model(None, "<s>", "</s>", user_choice=name)
        assert template.choice.source is TemplateSource.USER_CHOICE
        text = template.render(
            [
                {"role": "system", "content": "SYS"},
                {"role": "user", "content": "HI"},
            ]
        )
        assert "SYS" in text and "HI" in text, name
        assert template.stop_strings, name


def test_a_model_without_template_gets_gemma_by_its_vocabulary(gemma_vocab_model: Path) -> None:
    with Engine.open(gemma_vocab_model, small_settings()) as engine:
        choice = engine.template_choice
        assert (choice.name, choice.source) == ("gemma", TemplateSource.BUILTIN_BY_VOCABULARY)
        assert "<start_of_turn>" in choice.reason
        prompt = engine.render_chat([{"role": "user", "content": "hello"}])
        assert prompt == "<start_of_turn>user\nhello<end_of_turn>\n<start_of_turn>model\n"
        # <end_of_turn> is a token llama.cpp counts as end of generation: no stop string.
        assert engine._h.end_markers.strings == ()
        # The model's grammar-forced reply ends where its end-of-turn token comes.
        params = SamplingParams(temperature=0, max_tokens=40, grammar='root ::= "hello world"')
        done = engine.chat([{"role": "user", "content": "hi"}], params)
        assert (done.text, done.finish_reason) == ("hello world", "eog")


def test_a_chosen_template_stops_at_its_marker_written_as_text(
    gemma_vocab_model: Path,
) -> None:
    """ChatML on a vocabulary without <|im_end|> (what every such model got before): the
    marker is text, so it becomes a stop string and never reaches the reply."""
    settings = ModelSettings(chat_template="chatml")
    with Engine.open(gemma_vocab_model, small_settings(), settings) as engine:
        choice = engine.template_choice
        assert (choice.name, choice.source) == ("chatml", TemplateSource.USER_CHOICE)
        assert engine._h.end_markers.strings == ("<|im_end|>",)
        params = SamplingParams(temperature=0, max_tokens=60, grammar=_RUNS_ON)
        done = engine.chat([{"role": "user", "content": "hi"}], params)
        assert (done.text, done.finish_reason) == ("hello world", "stop")
        # A raw prompt is not a chat turn: the template's markers are not its stops.
        key = engine.open_sequence()
        engine.set_prompt(key, "hello")
        raw = engine.complete(key, params)
        assert "<|im_end|>" in raw.text
        # Back to automatic, live: the vocabulary's choice again.
        assert engine.set_chat_template("").name == "gemma"


def test_a_template_file_and_a_bad_choice(gemma_vocab_model: Path, tmp_path: Path) -> None:
    file = tmp_path / "mine.jinja"
    file.write_text(
        "{% for m in messages %}<start_of_turn>{{ m['role'] }}\n{{ m['content'] }}"
        "<end_of_turn>\n{% endfor %}<start_of_turn>model\n",
        encoding="utf-8",
    )
    assert user_template(str(file)).source is TemplateSource.USER_FILE
    with Engine.open(gemma_vocab_model, small_settings()) as engine:
        choice = engine.set_chat_template(str(file))
        assert (choice.name, choice.source) == ("mine", TemplateSource.USER_FILE)
        with pytest.raises(SettingsError, match="neither a bundled chat template"):
            engine.set_chat_template("no-such-template")
        assert engine.template_choice.name == "mine", "a refused choice changes nothing"
    with pytest.raises(SettingsError, match="gemma"):
        ModelSettings(chat_template=str(tmp_path / "missing.jinja")).validate()


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", "run", *args], capture_output=True, text=True, timeout=300
    )


def test_run_json_names_the_template_and_chat_template_overrides(
    gemma_vocab_model: Path, tmp_path: Path
) -> None:
    grammar = tmp_path / "runs-on.gbnf"
    grammar.write_text(_RUNS_ON, encoding="utf-8")
    common = ("-n", "40", "--temp", "0", "-t", "1", "--json", "--grammar", str(grammar))
    auto = _run(str(gemma_vocab_model), "hi", *common)
    assert auto.returncode == 0, auto.stderr
    data = json.loads(auto.stdout)
    assert data["chat_template_name"] == "gemma"
    assert data["chat_template_source"] == "builtin-by-vocabulary"
    assert "<start_of_turn>" in data["chat_template_reason"]
    chosen = _run(str(gemma_vocab_model), "hi", *common, "--chat-template", "chatml")
    assert chosen.returncode == 0, chosen.stderr
    data = json.loads(chosen.stdout)
    assert (data["chat_template_name"], data["chat_template_source"]) == (
        "chatml",
        "user-choice",
    )
    (result,) = data["results"]
    assert (result["text"], result["finish_reason"]) == ("hello world", "stop")
    bad = _run(str(gemma_vocab_model), "hi", "--chat-template", "nope", "--json")
    assert bad.returncode != 0
    assert "--chat-template" in bad.stderr and "neither a bundled" in bad.stderr


def test_serve_takes_chat_template_and_refuses_a_bad_one(gemma_vocab_model: Path) -> None:
    shown = subprocess.run(
        [sys.executable, "-m", "app", "serve", "--help"], capture_output=True, text=True
    )
    assert "--chat-template NAME|FILE" in shown.stdout
    bad = subprocess.run(
        [sys.executable, "-m", "app", "serve", str(gemma_vocab_model), "--chat-template", "x"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode != 0 and "neither a bundled chat template" in bad.stderr
