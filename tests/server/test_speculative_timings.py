"""The server takes llama-server's per-request speculative fields and reports its counts."""

from __future__ import annotations

from typing import Any

import httpx2
import pytest

PROMPT = "one two three four five six seven eight nine ten one two three four five six seven"


def _complete(http: httpx2.Client, **extra: Any) -> dict[str, Any]:
    body = {"prompt": PROMPT, "max_tokens": 24, "temperature": 0, **extra}
    r = http.post("/v1/completions", json=body)
    assert r.status_code == 200, r.text
    data: dict[str, Any] = r.json()
    return data


def test_timings_count_the_guesses_like_llama_server(http: httpx2.Client) -> None:
    plain = _complete(http)
    assert plain["timings"]["draft_n"] == 0 and plain["timings"]["draft_n_accepted"] == 0
    spec = _complete(http, **{"speculative.type": "ngram-simple", "speculative.n_max": 4})
    timings = spec["timings"]
    assert 0 <= timings["draft_n_accepted"] <= timings["draft_n"]
    assert spec["choices"][0]["text"] == plain["choices"][0]["text"]  # greedy: the same reply
    ours = _complete(http, speculative="ngram", draft_max=4)
    assert ours["timings"]["draft_n"] == timings["draft_n"]


def test_bad_speculative_fields_are_refused_with_a_sentence(http: httpx2.Client) -> None:
    r = http.post("/v1/completions", json={"prompt": "hi", "speculative.type": "lookahead"})
    assert r.status_code == 400 and "speculative.type" in r.json()["error"]["message"]
    r = http.post("/v1/completions", json={"prompt": "hi", "speculative.type": "draft"})
    assert r.status_code == 400 and "not available" in r.json()["error"]["message"]
    r = http.post("/v1/completions", json={"prompt": "hi", "speculative": "draft"})
    assert r.status_code == 400 and "speculative" in r.json()["error"]["message"]
    r = http.post("/v1/completions", json={"prompt": "hi", "speculative.n_max": 0})
    assert r.status_code == 400 and "speculative.n_max" in r.json()["error"]["message"]


@pytest.mark.parametrize("kind", ["none-x", "ngramfoo", "drafty", "lookahead"])
def test_only_llama_servers_own_kinds_are_taken(http: httpx2.Client, kind: str) -> None:
    r = http.post("/v1/completions", json={"prompt": "hi", "speculative.type": kind})
    assert r.status_code == 400 and "speculative.type" in r.json()["error"]["message"]
