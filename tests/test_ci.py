"""CI runs what it claims: ``.ci/run`` runs the README's test command, which builds
llama.cpp's own peers (``llama-server``, ``ggml-rpc-server``) before pytest, so the tests
that need them run instead of skipping; the files that name the pinned llama.cpp agree;
two builds of the peers at once take turns on the cache's lock."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

from tests.support import peers

ROOT = Path(__file__).resolve().parents[1]


def readme_test_command() -> str:
    """The command ``.ci/run`` runs, read out of README.md by .ci/run's own awk line."""
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    found = re.search(r"cmd=\$\((awk .+ README\.md)\)", script)
    assert found, ".ci/run no longer reads the test command out of README.md"
    out = subprocess.run(
        ["bash", "-c", found.group(1)], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return out.stdout.strip()


def steps(command: str) -> list[str]:
    return [step.strip() for step in command.split("&&")]


def test_the_readme_command_builds_the_peers_before_pytest() -> None:
    command = readme_test_command()
    assert command, "README.md's <!-- test-command --> marker has no command after it"
    parts = steps(command)
    peers_step = [i for i, s in enumerate(parts) if s == "python -m tests.support.peers"]
    pytest_step = [i for i, s in enumerate(parts) if s.startswith("python -m pytest")]
    assert peers_step and pytest_step, parts
    # "&&": a failed build stops the run instead of letting pytest fail 11 tests later
    assert peers_step[0] < pytest_step[0] == len(parts) - 1


def test_the_pinned_llama_cpp_is_the_same_everywhere() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    pins = [d for d in project["project"]["dependencies"] if d.startswith("llama-cpp-python")]
    assert pins == [f"llama-cpp-python=={peers.LLAMA_CPP_PYTHON}"]
    command = readme_test_command()
    named = set(re.findall(r"llama-cpp-python==([\w.]+)", command))
    assert named == {peers.LLAMA_CPP_PYTHON}, command
    # the app's RPC backend and the peers' are built alike
    assert 'CMAKE_ARGS="-DGGML_RPC=on"' in command
    assert "-DGGML_RPC=ON" in peers.CMAKE_FLAGS
    # the cache is keyed by the version the peers were built from
    assert peers.ROOT.name == f"llama-cpp-python-{peers.LLAMA_CPP_PYTHON}"
    assert (peers.LLAMA_SERVER.name, peers.RPC_SERVER.name) == peers.TARGETS


def test_the_peers_are_built() -> None:
    """The README's command built them before pytest (they are what the llama-server and
    RPC comparisons run): without them those tests fail, this one says why first."""
    assert peers.built(), (
        f"{peers.LLAMA_SERVER} or {peers.RPC_SERVER} is missing: python -m tests.support.peers"
    )
    for binary in (peers.LLAMA_SERVER, peers.RPC_SERVER):
        out = subprocess.run(
            [str(binary), "--help"], capture_output=True, text=True, timeout=60, check=False
        )
        assert "usage" in (out.stdout + out.stderr).lower(), (binary, out.returncode)


_HOLD = (
    "import sys; from pathlib import Path; from tests.support.peers import build_lock\n"
    "with build_lock(Path(sys.argv[1])): print('held', flush=True)"
)


def _holder(root: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", _HOLD, str(root)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_a_second_build_waits_for_the_first(tmp_path: Path) -> None:
    with peers.build_lock(tmp_path):
        second = _holder(tmp_path)
        assert second.stderr is not None
        # it says so before it blocks: no sleep, no race
        assert second.stderr.readline().strip() == peers.WAITING
        assert second.poll() is None  # still waiting: this process holds the lock
    out, err = second.communicate(timeout=120)
    assert (second.returncode, out.strip(), err) == (0, "held", "")


def test_a_free_lock_is_taken_at_once(tmp_path: Path) -> None:
    child = _holder(tmp_path)
    out, err = child.communicate(timeout=120)
    assert (child.returncode, out.strip(), err) == (0, "held", "")
    assert (tmp_path / peers.LOCK_NAME).exists()
