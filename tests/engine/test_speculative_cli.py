"""``run --spec`` / ``--draft-max`` and ``bench --spec``: flags, JSON and refusals."""

from __future__ import annotations

import json
from pathlib import Path

from tests.engine.test_cli import llamadesk
from tests.engine.test_speculative import CODE


def test_run_json_reports_the_guesses_and_generation_speed(smollm2: Path) -> None:
    prompt = "Copy this code:\n\n```python\n" + CODE + "```"
    common = ["run", str(smollm2), prompt, "-n", "64", "--temp", "0", "--json", "-c", "2048"]
    result = llamadesk(*common, "--spec", "ngram", "--draft-max", "6")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    spec = data["speculative"]
    assert spec["mode"] == "ngram" and spec["draft_max"] == 6
    assert 0 < spec["accepted"] <= spec["drafted"]
    assert data["timings"]["gen_tokens_per_s"] > 0
    off = json.loads(llamadesk(*common).stdout)["speculative"]
    assert off == {"mode": "off", "draft_max": 8, "drafted": 0, "accepted": 0}


def test_run_refuses_bad_speculative_flags(tiny_model: Path) -> None:
    # (no draft model yet: --spec offers only what exists)
    draft = llamadesk("run", str(tiny_model), "hi", "--spec", "draft")
    assert draft.returncode != 0 and "invalid choice" in draft.stderr
    zero = llamadesk("run", str(tiny_model), "hi", "--draft-max", "0")
    assert zero.returncode != 0 and "--draft-max" in zero.stderr
    bad = llamadesk("run", str(tiny_model), "hi", "--spec", "lookahead")
    assert bad.returncode != 0 and "invalid choice" in bad.stderr


def test_bench_names_the_flag_of_a_bad_value(tiny_model: Path) -> None:
    zero = llamadesk("bench", str(tiny_model), "--draft-max", "0")
    assert zero.returncode == 2 and zero.stderr.startswith("llamadesk: --draft-max: ")


def test_bench_takes_the_spec_flags(tiny_model: Path) -> None:
    args = ["bench", str(tiny_model), "--tabs", "2", "--n-prompt", "32", "--n-gen", "8"]
    result = llamadesk(*args, "--n-state", "64", "--spec", "ngram", "--draft-max", "4", "--json")
    assert result.returncode == 0, result.stderr
    spec = json.loads(result.stdout)["speculative"]
    assert spec["mode"] == "ngram" and spec["draft_max"] == 4
    assert 0 <= spec["accepted"] <= spec["drafted"]


def test_a_conversation_keeps_its_choice() -> None:
    """The per-conversation sampling (stored as the chat's ``sampling``) carries the mode and
    the draft length to the reply's SamplingParams; a new chat starts with it off."""
    from app.engine import SamplingParams
    from app.storage.settings import SamplingDefaults

    stored = SamplingDefaults(speculative="ngram", draft_max=4).to_dict()
    params = SamplingParams.from_dict(json.loads(json.dumps(stored)))
    assert (params.speculative, params.draft_max) == ("ngram", 4)
    assert SamplingDefaults().to_dict()["speculative"] == "off"
