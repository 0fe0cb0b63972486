"""``inspect`` says the chat template a load uses (issue 27, item 3): Gemma 3 270M has no
``tokenizer.chat_template`` and its vocabulary names Gemma's turns, so ``run`` uses the
built-in gemma template; ``inspect`` said "no (ChatML fallback)". Both now ask the same
function (``template_choice``), ``inspect`` with the header's vocabulary."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import gguf
import pytest

from tests.engine.test_template_choice import gemma_vocabulary
from tests.support.arch_models import write_arch_model

pytestmark = pytest.mark.timeout(300)


@dataclass(frozen=True)
class GemmaVocab:
    """Gemma's turn markers as control tokens, <eos> the EOS, no template (Gemma 3 270M)."""

    tokens: list[str]
    scores: list[float]
    types: list[int]
    chat_template: str = ""

    @property
    def n_tokens(self) -> int:
        return len(self.tokens)

    @property
    def eog_ids(self) -> tuple[int, ...]:
        return (self.tokens.index("<eos>"), self.tokens.index("<end_of_turn>"))

    def add_to_writer(self, writer: gguf.GGUFWriter) -> None:
        writer.add_tokenizer_model("llama")
        writer.add_token_list(self.tokens)
        writer.add_token_scores(self.scores)
        writer.add_token_types(self.types)
        writer.add_bos_token_id(self.tokens.index("<bos>"))
        writer.add_eos_token_id(self.tokens.index("<eos>"))
        writer.add_add_bos_token(True)
        writer.add_add_eos_token(False)


@pytest.fixture(scope="module")
def gemma3_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gemma3") / "tiny-gemma3.gguf"
    return write_arch_model(
        path, "gemma3", vocab=GemmaVocab(*gemma_vocabulary()), chat_template=None
    )


def _app(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=240
    )


def test_inspect_names_the_template_run_uses(gemma3_model: Path) -> None:
    inspected = _app("inspect", str(gemma3_model), "--json")
    assert inspected.returncode == 0, inspected.stderr
    data = json.loads(inspected.stdout)
    assert data["architecture"] == "gemma3" and data["chat_template"] is None
    choice = data["chat_template_choice"]
    assert (choice["name"], choice["source"]) == ("gemma", "builtin-by-vocabulary")
    text = _app("inspect", str(gemma3_model))
    assert text.returncode == 0, text.stderr
    row = next(line for line in text.stdout.splitlines() if line.startswith("Chat template"))
    assert "built-in gemma" in row and "ChatML" not in row
    ran = _app("run", str(gemma3_model), "hi", "-n", "2", "--temp", "0", "-t", "1", "--json")
    assert ran.returncode == 0, ran.stderr
    result = json.loads(ran.stdout)
    assert (result["chat_template_name"], result["chat_template_source"]) == (
        choice["name"],
        choice["source"],
    )
    assert result["chat_template_reason"] == choice["reason"]


def test_inspect_says_a_model_uses_its_own_template(tiny_model: Path) -> None:
    inspected = _app("inspect", str(tiny_model), "--json")
    assert inspected.returncode == 0, inspected.stderr
    assert json.loads(inspected.stdout)["chat_template_choice"]["source"] == "gguf"


def test_the_header_choice_is_the_loaded_models(
    gemma3_model: Path, tiny_model: Path, smollm2: Path, tmp_path: Path
) -> None:
    """Without loading (the header's vocabulary) and loaded (llama.cpp's): the same choice,
    also for a model whose only hint is its vocabulary's ChatML markers."""
    from app.engine import Engine
    from app.engine.metadata import read_model_header
    from app.engine.template_choice import choose_for_file
    from tests.support.settings import small_settings

    chatml_only = write_arch_model(tmp_path / "chatml-vocab.gguf", "llama", chat_template=None)
    for model in (gemma3_model, tiny_model, smollm2, chatml_only):
        info, header = read_model_header(model)
        engine = Engine.open(model, small_settings(n_seq_max=1))
        try:
            assert choose_for_file(info, header) == engine.template_choice, model.name
        finally:
            engine.close()
