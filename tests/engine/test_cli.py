"""The command line: llamadesk inspect / run / bench, in a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest


def llamadesk(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "app", *args], capture_output=True, text=True, timeout=300
    )


def test_inspect(tiny_model: Path) -> None:
    result = llamadesk("inspect", str(tiny_model), "--json")
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["architecture"] == "llama" and data["n_layer"] == 2
    text = llamadesk("inspect", str(tiny_model))
    assert "Architecture" in text.stdout and "llama" in text.stdout


def test_inspect_says_why_llama_cpp_cannot_load_a_file(tmp_path: Path) -> None:
    from tests.support.broken_gguf import write_corpus

    corpus = write_corpus(tmp_path / "broken")
    for name, message in (
        ("vocab_only", "holds only a vocabulary (no weights): it is a tokenizer file"),
        ("unknown_architecture", "architecture 'xllma'"),
        ("zero_dimension", "zero dimension"),
        ("misaligned_offset", "alignment (32)"),
        ("offset_past_end", "past the end of the file"),
    ):
        for extra in ([], ["--json"]):
            result = llamadesk("inspect", str(corpus[name]), *extra)
            assert result.returncode == 2, (name, result.stderr)
            assert result.stdout == ""
            line = result.stderr.strip()
            assert line.startswith(f"llamadesk: {corpus[name].name} ") and message in line, line
            assert len(line.splitlines()) == 1 and "Traceback" not in line


def test_run_json_raw_and_chat(tiny_model: Path) -> None:
    raw = llamadesk(
        "run", str(tiny_model), "hello world", "--raw", "-n", "8", "--temp", "0", "--json"
    )
    assert raw.returncode == 0, raw.stderr
    data = json.loads(raw.stdout)
    assert len(data["results"]) == 1
    assert set(data["results"][0]) >= {"text", "tokens"}
    assert "timings" in data
    chat = llamadesk(
        "run",
        str(tiny_model),
        "hello world",
        "--system",
        "be brief",
        "-n",
        "8",
        "--temp",
        "0",
        "--json",
    )
    assert chat.returncode == 0, chat.stderr
    assert json.loads(chat.stdout)["results"][0]["tokens"] != data["results"][0]["tokens"]


def test_parallel_runs_give_identical_greedy_results(tiny_model: Path) -> None:
    single = json.loads(
        llamadesk(
            "run", str(tiny_model), "one two", "--raw", "-n", "12", "--temp", "0", "--json"
        ).stdout
    )
    result = llamadesk(
        "run",
        str(tiny_model),
        "one two",
        "--raw",
        "-n",
        "12",
        "--temp",
        "0",
        "--parallel",
        "3",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    results = json.loads(result.stdout)["results"]
    assert len(results) == 3
    assert all(r["tokens"] == single["results"][0]["tokens"] for r in results)


def test_save_and_resume_session_equals_one_run(tiny_model: Path, tmp_path: Path) -> None:
    common = ["--raw", "--temp", "0", "--json"]
    one = json.loads(
        llamadesk("run", str(tiny_model), "hello world the model", "-n", "32", *common).stdout
    )["results"][0]
    session = tmp_path / "session.bin"
    first = llamadesk(
        "run",
        str(tiny_model),
        "hello world the model",
        "-n",
        "16",
        "--save-session",
        str(session),
        *common,
    )
    assert first.returncode == 0, first.stderr
    second = llamadesk(
        "run", str(tiny_model), "", "-n", "16", "--resume-session", str(session), *common
    )
    assert second.returncode == 0, second.stderr
    part1 = json.loads(first.stdout)["results"][0]
    part2 = json.loads(second.stdout)["results"][0]
    if len(one["tokens"]) == 32:
        assert part1["tokens"] + part2["tokens"] == one["tokens"]
        assert part1["text"] + part2["text"] == one["text"]


def test_resume_refuses_a_damaged_session(tiny_model: Path, tmp_path: Path) -> None:
    session = tmp_path / "s.bin"
    assert (
        llamadesk(
            "run", str(tiny_model), "hello", "--raw", "-n", "4", "--save-session", str(session)
        ).returncode
        == 0
    )
    data = bytearray(session.read_bytes())
    data[-10] ^= 0xFF
    session.write_bytes(bytes(data))
    result = llamadesk("run", str(tiny_model), "", "-n", "4", "--resume-session", str(session))
    assert result.returncode == 2
    assert "cannot be used" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "/nonexistent/model.gguf", "hi"], "does not exist"),
        (["inspect", "/nonexistent/model.gguf"], "does not exist"),
        (["run", "MODEL", "hi", "-c", "10"], "at least 64"),
        (["run", "MODEL", "hi", "--temp", "-1"], "Temperature"),
        (["run", "MODEL", "hi", "--parallel", "0"], "--parallel"),
        (["run", "MODEL", "hi", "--resume-session", "/nonexistent"], "does not exist"),
        (["run", "MODEL", "word " * 400, "--raw", "-c", "64"], "shorten the message"),
        (["run", "MODEL", "word " * 400, "-c", "64", "--parallel", "2"], "the context holds"),
        (["bench", "MODEL", "--tabs", "0"], "--tabs must be at least 1"),
    ],
)
def test_errors_exit_2_with_one_sentence(tiny_model: Path, args: list[str], message: str) -> None:
    result = llamadesk(*[str(tiny_model) if a == "MODEL" else a for a in args])
    assert result.returncode == 2
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len(result.stderr.strip().splitlines()) <= 2


def test_bench_json(tiny_model: Path) -> None:
    result = llamadesk(
        "bench",
        str(tiny_model),
        "--tabs",
        "2",
        "--n-prompt",
        "64",
        "--n-gen",
        "8",
        "--n-state",
        "200",
        "--json",
    )
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["restored"] is True
    for key in (
        "prompt_tokens_per_s",
        "gen_tokens_per_s_1_tab",
        "gen_tokens_per_s_2_tabs",
        "save_s",
        "restore_s",
        "reprocess_s",
    ):
        assert data[key] > 0


def test_options_between_model_and_prompt(tiny_model: Path) -> None:
    a = llamadesk(
        "run", str(tiny_model), "--raw", "hello world", "-n", "4", "--temp", "0", "--json"
    )
    b = llamadesk(
        "run", str(tiny_model), "hello world", "--raw", "-n", "4", "--temp", "0", "--json"
    )
    assert a.returncode == 0, a.stderr
    assert json.loads(a.stdout)["results"] == json.loads(b.stdout)["results"]
    bad = llamadesk("inspect", str(tiny_model), "--bogus")
    assert bad.returncode == 2 and "unrecognized arguments" in bad.stderr


def test_run_with_a_grammar_gives_reasoning_apart(tmp_path: Path) -> None:
    from tests.support.gguf_models import TinySpec, write_tiny_model

    root = Path(__file__).resolve().parents[2]
    template = (root / "tests/data/chat-templates/Qwen-Qwen3-0.6B.jinja").read_text()
    model = write_tiny_model(tmp_path / "think.gguf", TinySpec(chat_template=template))
    grammar = str(root / "resources/grammars/think-then-answer.gbnf")
    result = llamadesk("run", str(model), "hello", "--temp", "0", "--grammar", grammar, "--json")
    assert result.returncode == 0, result.stderr
    (reply,) = json.loads(result.stdout)["results"]
    assert reply["reasoning"].split() and reply["text"].split()
    assert "think>" not in reply["text"] + reply["reasoning"]
    plain = llamadesk("run", str(model), "hello", "--temp", "0", "--grammar", grammar)
    assert plain.stdout.strip() == reply["text"].strip()  # the answer only
    shown = llamadesk(
        "run", str(model), "hello", "--temp", "0", "--grammar", grammar, "--show-reasoning"
    )
    assert reply["reasoning"] in shown.stderr
    missing = llamadesk("run", str(model), "hello", "--grammar", str(tmp_path / "none.gbnf"))
    assert missing.returncode == 2 and "grammar file" in missing.stderr


@pytest.mark.parametrize("command", ["run", "bench"])
def test_help_shows_the_schema(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    from app import engine_cli
    from app.cli import build_parser

    with pytest.raises(SystemExit):
        build_parser().parse_args([command, "--help"])
    text = "".join(capsys.readouterr().out.split())  # argparse wraps the lines
    specs = (
        (*engine_cli.RUN_SAMPLING, *engine_cli.RUN_CONTEXT)
        if command == "run"
        else engine_cli.BENCH_CONTEXT
    )
    for spec in specs:
        assert spec.cli is not None
        for flag in spec.cli.flags:
            assert flag in text, flag
        assert "".join(spec.help.split()) in text, spec.name
        if spec.range_text():
            assert "".join(f"Valid: {spec.range_text()}".split()) in text, spec.name
    if command == "run":
        assert "(default128)" in text and "(default0.8)" in text  # -n and --temp


def test_flags_keep_their_names_and_fill_the_schema_fields() -> None:
    from app import engine_cli
    from app.cli import build_parser

    line = "run m.gguf hi -n 7 --temp 0 --top-k 5 --seed 9 --stop a --stop b -c 2048 -b 256 -t 2"
    args = build_parser().parse_args(line.split())
    params = engine_cli.sampling_params(args)
    assert (params.max_tokens, params.temperature, params.top_k, params.seed) == (7, 0.0, 5, 9)
    assert params.stop == ["a", "b"] and params.repeat_penalty == 1.0
    settings = engine_cli.context_settings(args, 3)
    assert (settings.n_ctx, settings.n_batch, settings.n_ubatch, settings.n_seq_max) == (
        2048,
        256,
        256,
        3,
    )
    assert settings.n_threads == settings.n_threads_batch == 2
    default = engine_cli.context_settings(build_parser().parse_args(["run", "m.gguf"]), 1)
    assert default.n_threads > 0 and default.n_ctx == 4096


def test_run_is_a_client_of_the_session(
    tiny_model: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``run`` goes through :class:`app.session.Session` (as the window and the API server
    do), never the engine's own loop; its turns are submitted together in one batch."""
    from contextlib import AbstractContextManager

    from app import crash_supervisor
    from app.cli import main
    from app.engine import Engine
    from app.session import Session

    def refused(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("run drove the engine directly")

    # the command in this process (its patches apply), not in the child `run` forks
    monkeypatch.setenv(crash_supervisor.DISABLE_ENV, "1")
    for name in ("open", "run_until_done", "complete"):
        monkeypatch.setattr(Engine, name, refused)
    batches: list[int] = []
    batch = Session.batch

    def counted(self: Session) -> AbstractContextManager[None]:
        batches.append(1)
        return batch(self)

    monkeypatch.setattr(Session, "batch", counted)
    args = ["run", str(tiny_model), "one two", "--raw", "-n", "5", "--temp", "0"]
    assert main([*args, "--parallel", "2", "--json"]) == 0
    results = json.loads(capsys.readouterr().out)["results"]
    assert len(results) == 2 and results[0]["tokens"] == results[1]["tokens"]
    assert len(results[0]["tokens"]) == 5 and batches == [1]
    assert main(args) == 0  # streamed to standard output
    assert capsys.readouterr().out == results[0]["text"] + "\n"


def test_run_json_says_how_the_model_reasons(tmp_path: Path, tiny_model: Path) -> None:
    """``reasoning_defaults``: the template's format and llama-server's thinking default."""
    from tests.support.gguf_models import TinySpec, write_tiny_model

    root = Path(__file__).resolve().parents[2]
    for name, fmt, thinking in (
        ("Qwen-Qwen3-0.6B", "think_tags", True),
        ("Apertus-8B-Instruct", "apertus", False),  # llama-server's parser knows no markers
    ):
        template = (root / f"tests/data/chat-templates/{name}.jinja").read_text()
        model = write_tiny_model(tmp_path / f"{name}.gguf", TinySpec(chat_template=template))
        result = llamadesk("run", str(model), "hello", "-n", "2", "--temp", "0", "--json")
        assert result.returncode == 0, result.stderr
        defaults = json.loads(result.stdout)["reasoning_defaults"]
        assert defaults["format"] == fmt and defaults["rule"] == "llama-server"
        assert defaults["thinking_by_default"] is thinking
        assert defaults["thinking_enabled_by_rule"] is thinking
    plain = llamadesk("run", str(tiny_model), "hello", "-n", "2", "--temp", "0", "--json")
    defaults = json.loads(plain.stdout)["reasoning_defaults"]
    assert defaults["format"] == "none" and defaults["thinking_by_default"] is False


def test_a_long_prompt_without_a_model_is_a_prompt_not_a_file_name() -> None:
    """`llamadesk run "PROMPT"` takes a long prompt (over the 255 bytes a file name may
    have, which the system refuses with an error) as the prompt for the default model."""
    prompt = "Tell me about llamas. " * 20
    result = llamadesk("run", prompt, "-n", "2", "--temp", "0", "--json")
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert json.loads(result.stdout)["results"][0]["n_prompt"] > 20
