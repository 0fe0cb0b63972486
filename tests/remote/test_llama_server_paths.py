"""The remote engine's llama-server-only paths, piece by piece, against llama.cpp's own
``llama-server`` (built by ``python -m tests.support.peers``) instead of hand-written
dicts: what the probe reads from it (the server's kind, its slots, the token route, slot
files), the token route's rules (a mixed prompt is one prompt, a list of texts several;
the reply's tokens sent back are read from the cache, not again), slot pinning
(``id_slot``), slot save and restore (:mod:`app.remote.slots`), and a regenerate that
reads only the prompt's last token. The whole engine on these paths:
tests/remote/test_llama_server.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.engine import SamplingParams
from app.engine.cpu_quirks import amx_guard_active, llama_server_flags
from app.errors import LlamaDeskError
from app.remote import RemoteConnection, ServerKind
from app.remote.completion import Held, Piece, held_after, prepare, prompt_of, read_piece
from app.remote.probe import probe
from app.remote.slots import new_name, probe_slot_files, restore_slot, save_slot
from tests.remote.llama_server_process import start_llama_server

pytestmark = pytest.mark.timeout(180)

ENDLESS = 'root ::= ("hello" | " world" | " tab" | " llama") root'
N_REPLY = 6
SAMPLING = SamplingParams(max_tokens=N_REPLY, temperature=0.0)


@pytest.fixture(scope="module")
def slot_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("slots")


@pytest.fixture(scope="module")
def server(tiny_model: Path, slot_dir: Path) -> Iterator[str]:
    proc, url = start_llama_server(tiny_model, "--slot-save-path", str(slot_dir))
    yield url
    proc.terminate()
    proc.wait(30)


@pytest.fixture
def client() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=60) as c:
        yield c


@dataclass
class Streamed:
    pieces: list[Piece]
    raw: list[dict[str, Any]]

    @property
    def text(self) -> str:
        return "".join(p.content for p in self.pieces)

    @property
    def tokens(self) -> list[int]:
        return [t for p in self.pieces for t in p.tokens]

    @property
    def last(self) -> Piece:
        return self.pieces[-1]

    @property
    def cache_n(self) -> int:
        return int(self.raw[-1]["timings"]["cache_n"])

    @property
    def prompt_n(self) -> int:
        """Prompt tokens the server read (not taken from its cache)."""
        return int(self.raw[-1]["timings"]["prompt_n"])

    @property
    def evaluated(self) -> int:
        return int(self.raw[-1]["tokens_evaluated"])


def complete(client: httpx2.Client, url: str, body: dict[str, Any]) -> Streamed:
    """Stream ``/completion`` and read every chunk with the engine's reader."""
    raw: list[dict[str, Any]] = []
    with client.stream("POST", f"{url}/completion", json=body) as response:
        assert response.status_code == 200, response.read()[:300]
        for line in response.iter_lines():
            if line.startswith("data: "):
                raw.append(json.loads(line[len("data: ") :]))
    return Streamed([read_piece(chunk) for chunk in raw], raw)


def chat_fields(slot: int) -> dict[str, Any]:
    """The chat completion body fields the token route carries over (see ``prepare``)."""
    return {"id_slot": slot, "temperature": 0.0, "seed": 7, "grammar": ENDLESS}


def slot_tasks(client: httpx2.Client, url: str) -> dict[int, int | None]:
    return {s["id"]: s.get("id_task") for s in client.get(f"{url}/slots").json()}


def test_the_probe_reads_llama_servers_own_answers(server: str, client: httpx2.Client) -> None:
    conn = RemoteConnection(server)
    traits = probe(client, conn)
    assert traits.kind is ServerKind.LLAMA_SERVER
    assert traits.total_slots == 2 and traits.pins_slots
    assert traits.n_ctx == 2048  # -c 4096 over --parallel 2
    assert traits.token_prompts  # /apply-template answers: the token route
    assert traits.slot_files and probe_slot_files(client, conn)  # --slot-save-path
    assert traits.reports_progress and traits.keeps_prompt_cache and traits.counts_tokens


def test_without_a_slot_save_path_there_are_no_slot_files(
    tiny_model: Path, client: httpx2.Client
) -> None:
    proc, url = start_llama_server(tiny_model)
    try:
        conn = RemoteConnection(url)
        assert not probe_slot_files(client, conn)
        traits = probe(client, conn)
        assert traits.kind is ServerKind.LLAMA_SERVER and not traits.slot_files
    finally:
        proc.terminate()
        proc.wait(30)


def test_a_mixed_prompt_is_one_prompt_and_texts_alone_are_several(
    server: str, client: httpx2.Client
) -> None:
    """Why ``prompt_of`` joins texts that hold no token id."""
    assert prompt_of(("hello", " world")) == "hello world"
    several = client.post(
        f"{server}/completion", json={"prompt": ["hello", " world"], "n_predict": 1}
    ).json()
    assert isinstance(several, list) and len(several) == 2
    world = client.post(f"{server}/tokenize", json={"content": " world"}).json()["tokens"]
    mixed = prompt_of(("hello", *world))
    assert isinstance(mixed, list)
    one = client.post(f"{server}/completion", json={"prompt": mixed, "n_predict": 1}).json()
    assert isinstance(one, dict) and one["stop"] is True


def test_the_token_route_reads_only_the_new_text_on_its_pinned_slot(
    server: str, client: httpx2.Client, slot_dir: Path
) -> None:
    first_text = "hello world"
    first = prepare(chat_fields(1), SAMPLING, (), first_text)
    assert first.body["prompt"] == first_text and first.body["return_tokens"] is True
    before = slot_tasks(client, server)
    got = complete(client, server, first.body)
    # a prompt-progress chunk carries a placeholder token that the reader leaves out
    progress = [i for i, c in enumerate(got.raw) if "prompt_progress" in c]
    assert progress and all(got.pieces[i].tokens == () for i in progress)
    assert (got.last.stop_type, got.last.n_predicted) == ("limit", N_REPLY)
    assert len(got.tokens) == N_REPLY  # every reply token came back
    # pinned: slot 1 ran it, slot 0 ran nothing new
    after = slot_tasks(client, server)
    assert after[0] == before[0] and after[1] != before[1], (before, after)
    held = held_after(first, got.text, got.tokens, got.last.stop_type, got.last.n_predicted)
    assert held == (
        Held(first_text, (first_text,)),
        Held(first_text + got.text, (first_text, *got.tokens)),
    )

    # the next turn begins with the first one and its reply: sent as the first turn's
    # text and the reply's own tokens, then the new text
    next_text = first_text + got.text + " tab"
    second = prepare(chat_fields(1), SAMPLING, held, next_text)
    assert second.body["prompt"] == [first_text, *got.tokens, " tab"]
    assert second.reused == 1 + N_REPLY
    again = complete(client, server, second.body)
    # the cache held the first prompt and the reply (all but its last token, sampled and
    # never decoded): only that token and " tab" are read
    assert again.cache_n >= got.evaluated + N_REPLY - 1, again.raw[-1]["timings"]
    new_tokens = again.evaluated - got.evaluated - N_REPLY
    assert 0 < new_tokens and again.prompt_n <= new_tokens + 1, again.raw[-1]["timings"]
    assert slot_tasks(client, server)[0] == before[0]  # still slot 1's

    # a regenerate sends the last prompt as it was: all but its last token are cached
    regenerate = prepare(chat_fields(1), SAMPLING, held, first_text)
    assert regenerate.body["prompt"] == first_text and regenerate.body["id_slot"] == 1
    redo = complete(client, server, regenerate.body)
    assert redo.evaluated == got.evaluated
    assert redo.cache_n == got.evaluated - 1 and redo.prompt_n == 1, redo.raw[-1]["timings"]
    assert redo.tokens == got.tokens  # greedy, same prompt: the same reply


def test_a_slot_saved_to_a_file_is_restored_into_another_slot(
    server: str, client: httpx2.Client, slot_dir: Path
) -> None:
    conn = RemoteConnection(server)
    text = "llama tab llama world hello"
    first = complete(client, server, prepare(chat_fields(1), SAMPLING, (), text).body)
    name = new_name()
    saved = save_slot(client, conn, 1, name)
    # the prompt and the reply's decoded tokens (the last one was sampled, not decoded)
    assert saved.name == name and saved.n_tokens == first.evaluated + N_REPLY - 1
    assert (slot_dir / name).stat().st_size > 0
    assert restore_slot(client, conn, 0, name) == saved.n_tokens
    # slot 0 never read this prompt: what it has came from the file
    on_zero = complete(client, server, prepare(chat_fields(0), SAMPLING, (), text).body)
    assert on_zero.cache_n == first.evaluated - 1, on_zero.raw[-1]["timings"]
    with pytest.raises(LlamaDeskError, match=r"could not be restored: .+\.$"):
        restore_slot(client, conn, 0, "llamadesk-missing.bin")


def test_the_real_model_runs_on_this_cpu_with_the_apps_quirk_flags(
    smollm2: Path, client: httpx2.Client
) -> None:
    """start_llama_server passes app.engine.cpu_quirks.llama_server_flags(): where
    llama.cpp's AMX kernels crash (this machine's Xeon: without ``--no-repack``
    llama-server dies of SIGILL loading SmolLM2's Q4_1 weights, LLAMADESK_AMX=on shows
    it), the peer keeps off them as the app does, and a batch of several tokens decodes."""
    proc, url = start_llama_server(smollm2)
    try:
        reply = client.post(
            f"{url}/completion",
            json={"prompt": "The llama is an animal that", "n_predict": 4, "temperature": 0},
        )
        assert reply.status_code == 200, reply.text[:300]
        body = reply.json()
        assert body["tokens_evaluated"] > 4 and body["tokens_predicted"] == 4
        assert proc.poll() is None
    finally:
        proc.terminate()
        proc.wait(30)


@pytest.mark.parametrize("mode", ["off", "on"])
def test_the_peer_is_started_with_the_apps_amx_rule(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    """LLAMADESK_AMX=off keeps the app off AMX without checking, =on uses it: the peer's
    command line follows (where this CPU and build have AMX at all)."""
    monkeypatch.setenv("LLAMADESK_AMX", mode)
    expected = ["--no-repack"] if amx_guard_active() else []
    assert llama_server_flags() == expected
    proc, _ = start_llama_server(tiny_model)
    try:
        argv = Path(f"/proc/{proc.pid}/cmdline").read_bytes().split(b"\0")
        assert (b"--no-repack" in argv) == bool(expected), argv
    finally:
        proc.terminate()
        proc.wait(30)
