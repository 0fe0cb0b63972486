"""``run`` on SmolLM2: one sequence, and ``--parallel 3`` (several sequences' tokens in one
batch: the decode that died in llama.cpp's AMX kernels, issue 27 item 1).

The parallel sequences share a batch, so each is checked by logits within a tolerance
against a one-sequence run (tests/real/logit_check.py); the one-sequence ``run`` is the
same shape as that reference, and its tokens are each the best logit.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from app.engine import Engine
from tests.real.conftest import run_json
from tests.real.logit_check import assert_greedy_within, solo_engine

pytestmark = pytest.mark.timeout(300)
QUESTION = "Name three colors."


@pytest.fixture(scope="module")
def reference(smollm2: Path) -> Iterator[Engine]:
    with solo_engine(smollm2) as engine:
        yield engine


def _run(model: Path, home: Path, *extra: str) -> dict[str, Any]:
    return run_json(
        model, home, QUESTION, "--temp", "0", "-n", "16", "-c", "2048", "-t", "1", *extra
    )


@pytest.mark.parametrize("parallel", [1, 3])
def test_run_gives_greedy_replies(
    smollm2: Path, cli_home: Path, reference: Engine, parallel: int
) -> None:
    results = _run(smollm2, cli_home, "--parallel", str(parallel))["results"]
    assert len(results) == parallel
    messages = [{"role": "user", "content": QUESTION}]
    for result in results:
        assert result["finish_reason"] in ("eog", "length") and result["tokens"]
        worst = assert_greedy_within(
            reference, messages, result["tokens"], ended=result["finish_reason"] == "eog"
        )
        if parallel == 1:
            assert worst == 0.0  # the same shape as the reference: its best token each time
