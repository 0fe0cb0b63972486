"""``POST /slots/{id}?action=save|restore|erase`` (llama-server's shapes), files confined to
the states folder's ``slots/``, and ``/props`` naming the model by its absolute path."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx2
import pytest

from app.server import ServerConfig
from tests.server.conftest import MakeServer

HISTORY = [{"role": "user", "content": "the llama keeps the slot warm " * 8}]


def named_chat(http: httpx2.Client, messages: list[dict[str, str]], name: str) -> Any:
    reply = http.post(
        "/v1/chat/completions",
        json={"messages": messages, "max_tokens": 3, "temperature": 0, "conversation": name},
    )
    assert reply.status_code == 200, reply.text
    return reply.json()


def slot_of(http: httpx2.Client, name: str) -> dict[str, Any]:
    slots = http.get("/slots").json()
    index = next(i for i, s in enumerate(slots) if s["conversation"] == name)
    return {"index": index, **slots[index]}


@pytest.fixture
def server_home(make_server: MakeServer, tmp_path: Path) -> tuple[httpx2.Client, Path]:
    runner = make_server(ServerConfig(port=0, parallel=2, max_resident=2))
    http = httpx2.Client(base_url=runner.url, timeout=60)
    return http, tmp_path / "home0"


def test_save_erase_restore_round_trip(server_home: tuple[httpx2.Client, Path]) -> None:
    http, home = server_home
    first = named_chat(http, HISTORY, "slotted")
    slot = slot_of(http, "slotted")
    i = slot["index"]

    saved = http.post(f"/slots/{i}?action=save", json={"filename": "slotted.bin"})
    assert saved.status_code == 200, saved.text
    body = saved.json()
    path = home / "states" / "slots" / "slotted.bin"
    assert body["id_slot"] == i and body["filename"] == "slotted.bin"
    assert body["n_written"] == path.stat().st_size > 0
    # the prompt and the reply's tokens but the last (sampled, never decoded)
    n_prompt = first["usage"]["prompt_tokens"]
    assert n_prompt <= body["n_saved"] <= n_prompt + first["usage"]["completion_tokens"]
    assert body["timings"]["save_ms"] >= 0

    erased = http.post(f"/slots/{i}?action=erase")  # no body, as llama-server's clients send
    assert erased.status_code == 200, erased.text
    assert erased.json() == {"id_slot": i, "n_erased": body["n_saved"]}
    assert slot_of(http, "slotted")["n_prompt_tokens"] == 0
    assert slot_of(http, "slotted")["index"] == i  # slot numbers do not move

    restored = http.post(f"/slots/{i}?action=restore", json={"filename": "slotted.bin"})
    assert restored.status_code == 200, restored.text
    r = restored.json()
    assert r["id_slot"] == i and r["filename"] == "slotted.bin"
    assert r["n_restored"] == body["n_saved"] and r["n_read"] == body["n_written"]
    assert "restore_ms" in r["timings"]
    assert slot_of(http, "slotted")["n_prompt_tokens"] == r["n_restored"]

    # the restored cache serves the re-sent chat
    history = [
        *HISTORY,
        {"role": "assistant", "content": first["choices"][0]["message"]["content"]},
        {"role": "user", "content": "more"},
    ]
    again = named_chat(http, history, "slotted")
    assert again["usage"]["prompt_tokens_details"]["cached_tokens"] >= n_prompt


BAD_NAMES: list[Any] = [
    "../escape.bin",
    "a/b.bin",
    "a\\b.bin",
    "..",
    ".hidden",
    "-rf",
    "",
    "x" * 129,
    "név.bin",
    "a b.bin",
    "/etc/passwd",
    "nul\x00.bin",
    5,
]


def test_slot_file_names_are_checked(
    server_home: tuple[httpx2.Client, Path], tmp_path: Path
) -> None:
    http, home = server_home
    named_chat(http, HISTORY, "names")
    i = slot_of(http, "names")["index"]
    for name in BAD_NAMES:
        for action in ("save", "restore"):
            reply = http.post(f"/slots/{i}?action={action}", json={"filename": name})
            assert reply.status_code == 400, (action, name, reply.text)
            error = reply.json()["error"]
            assert error["param"] == "filename" and error["message"].endswith(".")
    folder = home / "states" / "slots"
    assert not folder.exists() or not any(folder.iterdir())
    assert not (tmp_path / "escape.bin").exists() and not (home / "escape.bin").exists()
    assert not (home / "states" / "escape.bin").exists()


def test_slot_requests_that_cannot_be_served(server_home: tuple[httpx2.Client, Path]) -> None:
    http, home = server_home
    named_chat(http, HISTORY, "odd")
    i = slot_of(http, "odd")["index"]
    cases = [
        (f"/slots/{i}?action=save", None, 400, "'filename'"),
        (f"/slots/{i}?action=fly", {"filename": "a.bin"}, 400, "save, restore or erase"),
        (f"/slots/{i}", {"filename": "a.bin"}, 400, "save, restore or erase"),
        ("/slots/99?action=erase", None, 404, "no slot 99"),
        ("/slots/x?action=erase", None, 400, "not a slot number"),
        (f"/slots/{i}?action=restore", {"filename": "never-saved.bin"}, 404, "save one first"),
        (f"/slots/{i}?action=save", [1, 2], 400, "JSON object"),
    ]
    for url, body, status, words in cases:
        reply = http.post(url, json=body) if body is not None else http.post(url)
        assert reply.status_code == status, (url, reply.text)
        assert words in reply.json()["error"]["message"], (url, reply.text)
    # a damaged file is refused with the reason, and the slot still works
    folder = home / "states" / "slots"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "damaged.bin").write_bytes(b"not a state file" * 10)
    reply = http.post(f"/slots/{i}?action=restore", json={"filename": "damaged.bin"})
    assert reply.status_code == 400 and "was not restored" in reply.json()["error"]["message"]
    assert http.get("/slots").json()[i]["is_processing"] is False
    named_chat(http, HISTORY, "odd")


def test_props_names_the_model_by_its_absolute_path(
    make_server: MakeServer, long_model: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(long_model.parent)
    runner = make_server(ServerConfig(port=0, parallel=1), model=Path(long_model.name))
    props = httpx2.get(f"{runner.url}/props", timeout=30).json()
    assert Path(props["model_path"]).is_absolute()
    assert Path(props["model_path"]) == long_model.absolute()
