"""``llamadesk pull`` and ``llamadesk models`` end to end, in subprocesses, on the fake Hub."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.hub.fake_hub import FakeHub, Fault

REPO = "acme/Tiny-GGUF"


def _run(args: list[str], home: Path, endpoint: str) -> subprocess.CompletedProcess[str]:
    env = os.environ | {"LLAMADESK_HOME": str(home), "HF_ENDPOINT": endpoint}
    env.pop("HF_TOKEN", None)
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )


def test_pull_then_models(hub: FakeHub, tiny_gguf: Path, tmp_path: Path) -> None:
    hub.add_repo(REPO)
    for name in ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf"):
        hub.add_file(REPO, name, tiny_gguf)
    hub.fault(REPO, "tiny-Q8_0.gguf", Fault(drop_after=400_000))
    home = tmp_path / "home"
    out = _run(["pull", f"{REPO}:Q8_0"], home, hub.url)
    assert out.returncode == 0, out.stderr
    path = Path(out.stdout.strip())
    assert path == (home / "models" / "tiny-Q8_0.gguf").resolve()
    assert path.read_bytes() == tiny_gguf.read_bytes()
    assert "SHA-256 checked" in out.stderr and "retry" in out.stderr
    assert "\r" not in out.stderr  # no progress bar when stderr is not a terminal

    listed = _run(["models", "--json"], home, hub.url)
    assert listed.returncode == 0, listed.stderr
    (row,) = json.loads(listed.stdout)["models"]
    assert row["quantization"] == "Q8_0" and row["architecture"] == "llama"
    assert row["fit"] in ("fits", "tight", "will not fit") and row["size"] == path.stat().st_size
    table = _run(["models"], home, hub.url)
    assert "tiny-Q8_0.gguf" in table.stdout and "llama" in table.stdout


def test_pull_with_file_dir_and_endpoint(hub: FakeHub, tiny_gguf: Path, tmp_path: Path) -> None:
    hub.add_repo(REPO)
    hub.add_file(REPO, "sub/tiny-Q4_K_M.gguf", tiny_gguf)
    target = tmp_path / "elsewhere"
    out = _run(
        [
            "pull",
            REPO,
            "--file",
            "sub/tiny-Q4_K_M.gguf",
            "--dir",
            str(target),
            "--endpoint",
            hub.url,
        ],
        tmp_path / "home",
        "http://127.0.0.1:9",
    )
    assert out.returncode == 0, out.stderr
    assert Path(out.stdout.strip()) == (target / "tiny-Q4_K_M.gguf").resolve()


def test_pull_errors_are_one_sentence(hub: FakeHub, tiny_gguf: Path, tmp_path: Path) -> None:
    hub.add_repo(REPO)
    hub.add_file(REPO, "tiny-Q4_K_M.gguf", tiny_gguf)
    hub.add_repo("acme/NoGGUF")
    hub.add_file("acme/NoGGUF", "model.safetensors", tiny_gguf)
    cases = [
        ([f"{REPO}:Q2_K"], "has no Q2_K file; it has: Q4_K_M"),
        (["acme/NoGGUF"], "has no GGUF files"),
        ([REPO, "--file", "../../evil.gguf"], "not allowed"),
        (["acme/missing"], "acme/missing"),
    ]
    for args, expected in cases:
        out = _run(["pull", *args], tmp_path / "home", hub.url)
        assert out.returncode == 2, (args, out.stderr)
        assert out.stderr.startswith("llamadesk: ") and expected in out.stderr, out.stderr
        assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr
    assert not (tmp_path / "evil.gguf").exists()
