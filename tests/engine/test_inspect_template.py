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
