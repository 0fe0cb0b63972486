"""Status and figures texts a new user met (issue 28, item 6), on the pure functions that
make them: a remote reply's meter while it streams, a reply cut off by a fault."""

from __future__ import annotations

from app.session import FinishReason, ReplyMeta, TurnResult
from app.ui.message_data import MessageData, figures_text
from app.ui.tab_status import MeterFigures, TabFigures, TabState, state_text


def test_the_meter_counts_a_streaming_reply_the_engine_has_not_counted_yet() -> None:
    info = TabFigures(n_ctx=4096, engine="on box · LlamaDesk")
    before = MeterFigures.of(info, estimate=15)
    assert before.text(False) == "~15 / 4,096 tokens · not cached yet"
    streaming = MeterFigures.of(info, estimate=15, streamed=40)
    assert streaming.text(False) == "~55 / 4,096 tokens" and streaming.text(True) == "~55/4,096"
    assert "estimate" in streaming.tip()
    counted = MeterFigures.of(TabFigures(n_tokens=60, n_ctx=4096), estimate=15, streamed=40)
    assert counted.text(False).startswith("60 / 4,096")  # the engine's count wins


def test_a_quiet_stream_says_so_instead_of_a_falling_speed() -> None:
    info = TabFigures(n_ctx=4096)
    assert state_text(TabState.GENERATING, (0, 0), 25.1, info) == "generating at 25.1 tok/s"
    quiet = state_text(TabState.GENERATING, (0, 0), 25.1, info, quiet_s=5.4)
    assert quiet == "waiting for text: none for 5 s"


def test_a_reply_broken_off_by_a_fault_is_an_error_kept_as_cut_off() -> None:
    def meta(error: str | None) -> ReplyMeta:
        result = TurnResult(text="Hello", finish_reason=FinishReason.ABORTED, error=error)
        return ReplyMeta.of(result, "", "remote")

    assert meta(None).status == "stopped"  # the user's stop
    assert meta("Cannot reach box: the connection closed.").status == "error"
    cut = MessageData(2, "assistant", "Hello", status="error", finish="aborted")
    assert figures_text(cut).endswith("cut off")
    failed = MessageData(2, "assistant", "", status="error")
    assert figures_text(failed).endswith("error")
    stopped = MessageData(2, "assistant", "Hello", status="stopped", finish="aborted")
    assert figures_text(stopped).endswith("stopped")


def test_a_remote_model_is_named_by_its_file_not_its_quoted_address() -> None:
    from app.remote.saved import address
    from app.ui.model_names import model_file_name

    assert model_file_name(address("box", "/tmp/models/served.gguf")) == "served.gguf"
    assert model_file_name(address("box", "qwen2.5:7b")) == "qwen2.5:7b"
    assert model_file_name(address("box", "Qwen/Qwen2.5-7B")) == "Qwen/Qwen2.5-7B"
    assert model_file_name("/home/me/models/local.gguf") == "local.gguf"
