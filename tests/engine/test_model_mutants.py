"""Damaged model headers never kill the process: each load works or refuses with a sentence.

The mutants (tests/support/broken_gguf.py) change only the header of a model the tests
write: seeded random bytes zeroed, flipped or set to 0xFF, and targeted damage (two equal
token strings, arrays shorter than the vocabulary, counts that do not match, impossible
lengths and offsets). The sweep runs in a child process, so a mutant that still aborts
fails the test by name instead of taking pytest down.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from app.engine import ModelLoadError, load_check, load_check_runner
from app.engine.gguf_header import read_header
from app.engine.metadata import read_model_header
from tests.support.arch_models import write_arch_model
from tests.support.big_vocab import write_big_vocab_model
from tests.support.broken_gguf import (
    Mutant,
    parse,
    write_random_mutants,
    write_targeted_mutants,
)
from tests.support.gguf_models import TinySpec, write_tiny_model

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _no_verdicts_in_memory() -> None:
    """Each test has its own data folder: verdicts kept in memory by earlier tests (tiny
    models of other seeds share one header) must not answer for it."""
    load_check.forget()


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("mutant-bases")
    return {
        "tiny": write_tiny_model(folder / "tiny.gguf", TinySpec(seed=3)),
        "qwen3moe": write_arch_model(folder / "qwen3moe.gguf", "qwen3moe"),
        "bpe": write_big_vocab_model(folder / "bpe.gguf", "qwen2", n_embd=8),
    }


def _sweep(mutants: list[Mutant], home: Path, timeout: float = 600) -> dict[str, tuple[str, str]]:
    """name -> (outcome, message) from tests/support/broken_gguf.py's sweep in a child."""
    env = dict(os.environ, LLAMADESK_HOME=str(home), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-m", "tests.support.broken_gguf", *(str(m.path) for m in mutants)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        cwd=ROOT,
        check=False,
    )
    results: dict[str, tuple[str, str]] = {}
    last = None
    for line in proc.stdout.splitlines():
        kind, _, rest = line.partition(" ")
        name, _, message = rest.partition(" ")
        if kind == "BEGIN":
            last = name
        elif kind in ("LOADED", "REFUSED", "ERROR"):
            results[name] = (kind, json.loads(message) if message else "")
    if proc.returncode != 0:
        how = signal.Signals(-proc.returncode).name if proc.returncode < 0 else proc.returncode
        pytest.fail(f"the sweep died ({how}) while loading {last}: {proc.stderr[-2000:]}")
    return results


def _assert_sentence(name: str, message: str) -> None:
    assert name in message, (name, message)
    assert "Traceback" not in message and len(message) < 500, (name, message)
    assert message.rstrip().endswith("."), (name, message)


def test_targeted_mutants_are_refused_with_their_sentence(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    # Every kind of damage on the tiny llama; on the others what their header adds (BPE
    # merges and a 150k vocabulary, experts).
    only = {
        "tiny": None,
        "bpe": {
            "duplicate-token",
            "duplicate-after-zero-byte",
            "token-starts-with-zero",
            "short-token_type",
            "merges-missing",
            "merges-mistyped",
            "token-count-huge",
        },
        "qwen3moe": {
            "duplicate-token",
            "expert-count-huge",
            "head-count-array-too-short",
            "block-count-plus-one",
            "tensor-count-minus-one",
        },
    }
    mutants = [
        m
        for prefix, base in bases.items()
        for m in write_targeted_mutants(tmp_path / "targeted", base, prefix, only[prefix])
    ]
    assert len(mutants) > 45
    results = _sweep(mutants, tmp_path / "home")
    for m in mutants:
        outcome, message = results[m.path.name]
        assert outcome != "ERROR", (m.name, message)
        if m.expect is not None:
            assert outcome == "REFUSED", m.name
            assert m.expect in message, (m.name, message)
        if outcome == "REFUSED":
            _assert_sentence(m.path.name, message)
    # Damage that llama.cpp takes in its stride still loads.
    for loads in ("tiny-bos-out-of-range", "tiny-token-starts-with-zero"):
        assert results[f"{loads}.gguf"][0] == "LOADED", loads


def test_random_header_mutants_never_kill_the_process(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    counts = {"tiny": 48, "qwen3moe": 24, "bpe": 12}
    mutants = [
        m
        for seed, (prefix, base) in enumerate(bases.items())
        for m in write_random_mutants(tmp_path / "random", base, prefix, counts[prefix], seed)
    ]
    results = _sweep(mutants, tmp_path / "home")
    outcomes = {kind for kind, _ in results.values()}
    assert set(results) == {m.path.name for m in mutants}
    assert "ERROR" not in outcomes, [n for n, (k, _) in results.items() if k == "ERROR"]
    for name, (outcome, message) in results.items():
        if outcome == "REFUSED":
            _assert_sentence(name, message)
    # The sample is not all of one kind: some mutants load, some are refused.
    assert outcomes == {"LOADED", "REFUSED"}


ABORTING = {
    # mutant -> where the vendored llama.cpp aborts on it (what the header check prevents)
    "tiny-duplicate-token": "GGML_ASSERT(id_to_token.size() == token_to_id.size())",
    "tiny-duplicate-after-zero-byte": "GGML_ASSERT(id_to_token.size() == token_to_id.size())",
    "tiny-bert-with-byte-tokens": "llama-vocab.cpp",
    "tiny-block-count-0": "GGML_ASSERT(hparams.n_layer_all > 0",
    "tiny-nextn-layers": "GGML_ASSERT(hparams.n_layer_nextn <= hparams.n_layer_all)",
    "tiny-expert-count-huge": "GGML_ASSERT(hparams.n_expert <= LLAMA_MAX_EXPERTS)",
    "tiny-rope-scaling-unknown": "LLAMA_ROPE_SCALING_TYPE_UNSPECIFIED",
}


def test_header_checks_stand_for_real_aborts_and_the_child_catches_them(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    """Without the header checks, llama.cpp aborts on these: the child's verdict says so."""
    mutants = {
        m.name: m for m in write_targeted_mutants(tmp_path / "targeted", bases["tiny"], "tiny")
    }
    for name, where in ABORTING.items():
        path = mutants[name].path
        with pytest.raises(ModelLoadError):
            read_model_header(path)  # refused before llama.cpp is asked
        verdict = load_check.check(path, read_header(path), architecture="llama")
        assert not verdict.ok and verdict.source == "child", name
        assert "stops with SIGABRT" in verdict.message and where in verdict.message, (
            name,
            verdict.message,
        )
        _assert_sentence(path.name, verdict.message)
        assert "/tmp/" not in verdict.message  # the source file's name, not the build's path


def test_verdicts_are_kept_by_a_hash_of_the_header(tmp_path: Path) -> None:
    model = write_tiny_model(tmp_path / "model.gguf", TinySpec(seed=11))
    _, header = read_model_header(model)
    load_check.forget()
    first = load_check.check(model, header)
    assert first.ok and first.source == "child"
    assert load_check.check(model, header).source == "memory"
    load_check.forget()
    assert load_check.check(model, header).source == "disk"
    entries = list(load_check.cache_dir().glob("*.json"))
    assert len(entries) == 1 and json.loads(entries[0].read_text())["ok"] is True

    # Other weights, same header: the same verdict. An edited header: tried again.
    data = bytearray(model.read_bytes())
    data[-1] ^= 0x55
    reweighted = tmp_path / "reweighted.gguf"
    reweighted.write_bytes(bytes(data))
    assert read_header(reweighted).digest() == header.digest()
    load_check.forget()
    assert load_check.check(reweighted, read_header(reweighted)).source == "disk"
    edited = parse(model.read_bytes())
    name_kv = edited.get("general.name")
    name_kv[2] = name_kv[2][:8] + name_kv[2][8:].upper()
    renamed = tmp_path / "renamed.gguf"
    renamed.write_bytes(edited.encode())
    assert read_header(renamed).digest() != header.digest()
    assert load_check.check(renamed, read_header(renamed)).source == "child"
    # A truncated copy has the same header bytes but not the same size.
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(model.read_bytes()[:-64])
    assert read_header(cut).digest() != header.digest()


def test_a_cached_verdict_starts_no_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = write_tiny_model(tmp_path / "model.gguf", TinySpec(seed=12))
    _, header = read_model_header(model)
    first = load_check.check(model, header)
    assert first.ok and first.source == "child", first
    load_check.forget()

    def no_child(*args: object, **kwargs: object) -> None:
        raise AssertionError("a cached verdict must not start a process")

    monkeypatch.setattr(load_check_runner, "run_check", no_child)
    assert load_check.check(model, header).source == "disk"


def test_refusals_are_kept_and_a_broken_check_is_not(
    tmp_path: Path, bases: dict[str, Path]
) -> None:
    mutants = {
        m.name: m for m in write_targeted_mutants(tmp_path / "targeted", bases["tiny"], "tiny")
    }
    path = mutants["tiny-block-count-plus-one"].path  # the header passes; llama.cpp refuses
    _, header = read_model_header(path)
    load_check.forget()
    verdict = load_check.check(path, header)
    assert not verdict.ok and "is missing" in verdict.message
    load_check.forget()
    again = load_check.check(path, header)
    assert again.source == "disk" and again.message == verdict.message
    # A check that cannot finish in time says so: that load goes without extra buffer
    # types (nothing known to crash is tried), and nothing is kept.
    other = write_tiny_model(tmp_path / "slow.gguf", TinySpec(seed=13))
    _, other_header = read_model_header(other)
    slow = load_check.check(other, other_header, timeout=0.001)
    assert slow.ok and not slow.extra_bufts and slow.source == "unchecked"
    assert slow.notice.startswith("LlamaDesk could not finish checking slow.gguf within 0 s")
    assert load_check.check(other, other_header).source == "child"


def _cli(*args: str, home: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, LLAMADESK_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "app", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
        check=False,
    )


def test_run_and_inspect_on_mutants_exit_with_a_sentence(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    mutants = {
        m.name: m for m in write_targeted_mutants(tmp_path / "targeted", bases["tiny"], "tiny")
    }
    for name in ("tiny-duplicate-token", "tiny-block-count-plus-one", "tiny-string-length-huge"):
        path = mutants[name].path
        run = _cli("run", str(path), "Hello", "-n", "4", home=tmp_path / "home")
        assert run.returncode in (1, 2), (name, run.returncode, run.stderr[-500:])
        assert path.name in run.stderr and "Traceback" not in run.stderr, (name, run.stderr)
        inspect = _cli("inspect", str(path), home=tmp_path / "home")
        if name == "tiny-block-count-plus-one":  # only llama.cpp's list of tensors shows it
            assert inspect.returncode == 0, inspect.stderr
        else:
            assert inspect.returncode in (1, 2) and path.name in inspect.stderr, inspect.stderr
            assert "Traceback" not in inspect.stderr


def test_a_model_the_header_checks_pass_but_llama_cpp_aborts_on_is_refused(
    tmp_path: Path,
) -> None:
    """The child catches what no header check foresees: here a duplicate token hidden from
    them (the check is switched off), through the engine's real load path."""
    base = write_tiny_model(tmp_path / "base.gguf", TinySpec(seed=14))
    mutant = {m.name: m for m in write_targeted_mutants(tmp_path, base, "t")}["t-duplicate-token"]
    script = (
        "import sys\n"
        "from app.engine import Engine, ModelLoadError, header_checks\n"
        "header_checks._duplicate_problem = lambda tokens, damaged: None\n"
        "try:\n"
        "    Engine.open(sys.argv[1])\n"
        "except ModelLoadError as exc:\n"
        "    print(exc)\n"
        "    raise SystemExit(3)\n"
    )
    env = dict(os.environ, LLAMADESK_HOME=str(tmp_path / "home"), PYTHONPATH=str(ROOT))
    proc = subprocess.run(
        [sys.executable, "-c", script, str(mutant.path)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-1000:])
    assert "stops with SIGABRT" in proc.stdout and "id_to_token.size()" in proc.stdout
    shutil.rmtree(tmp_path / "home")


def test_a_new_process_and_the_forked_child_report_the_same(
    bases: dict[str, Path], tmp_path: Path
) -> None:
    """Each check runs in a new process, or (Linux) in a child forked from the warm helper:
    both end the same way on an aborting file and on a good one."""
    mutants = {
        m.name: m
        for m in write_targeted_mutants(tmp_path, bases["tiny"], "tiny", only={"duplicate-token"})
    }
    aborting = [str(mutants["tiny-duplicate-token"].path), "--n-gpu-layers", "0"]
    good = [str(bases["tiny"]), "--n-gpu-layers", "0"]
    runners = [load_check_runner.run_spawned, load_check_runner.run_check]
    for run in runners:
        outcome = run(aborting, 120)
        assert outcome.returncode == -signal.SIGABRT, (run, outcome)
        assert "GGML_ASSERT(id_to_token.size() == token_to_id.size())" in outcome.stderr
        outcome = run(good, 120)
        assert outcome.returncode == 0 and '{"ok": true' in outcome.stdout, (run, outcome)
    # A helper that went away is replaced on the next check.
    load_check_runner.close_helper()
    assert load_check_runner.run_check(good, 120).returncode == 0
