"""The context settings dialog's sentences: pure functions of the settings and the model
(what the loaded model really runs at, the memory estimate, what Apply does and did).

The dialog (:mod:`app.ui.settings_panel`) shows them; nothing here touches a widget.
"""

from __future__ import annotations

import html

from app.engine.metadata import ModelInfo
from app.engine.settings import ContextSettings
from app.session import LoadedModel
from app.settings_schema import format_bytes

LIVE_MARK = "⚡ Applies live"
REBUILD_MARK = "↻ Rebuilds context"
REBUILD_TIP = (
    "Changing this creates a new context. Every open tab is kept: resident tabs are saved, "
    "the context is rebuilt and the tabs are restored (a tab may re-read its conversation)."
)
LIVE_TIP = "Changing this takes effect immediately, without rebuilding the context."
STOP_TIP = (
    "Replies are being written: applying stops them first (what they wrote so far is kept), "
    "then rebuilds the context. Every open tab is kept."
)
ADVANCED_TEXT = "Advanced settings"


def apply_button(changed: bool, rebuild: bool, generating: bool) -> tuple[str, str]:
    """The Apply button's text and tooltip: nothing changed, the replies must stop first,
    the context is rebuilt, or only the threads change (live)."""
    if not changed:
        return "Apply", "Nothing has changed yet."
    if rebuild and generating:
        return "Stop all and apply", STOP_TIP
    if rebuild:
        return "Apply and rebuild context", REBUILD_TIP
    return "Apply (threads only, live)", LIVE_TIP


def generating_note(rebuild_pending: bool) -> str:
    """What applying does to the replies being written."""
    if rebuild_pending:
        return (
            "Replies are being written. Applying these settings stops them first (what "
            "they wrote so far is kept), then rebuilds the context."
        )
    return (
        "Replies are being written. Thread counts change without stopping them; "
        "settings that rebuild the context stop them when applied."
    )


def model_text(info: ModelInfo | None) -> str:
    """The model the settings are checked against, in a line (rich text)."""
    if info is None:
        return "<b>No model loaded.</b> Checks that depend on the model run when one is loaded."
    parts = [f"<b>{html.escape(info.display_name)}</b>"]
    if info.architecture:
        parts.append(html.escape(info.architecture))
    if info.n_params:
        parts.append(f"{info.params_label} parameters")
    if info.n_ctx_train:
        parts.append(f"trained for {info.n_ctx_train:,} tokens of context")
    return " · ".join(parts)


def estimate_text(settings: ContextSettings, info: ModelInfo | None) -> str:
    """The memory the context of ``settings`` takes with ``info``'s model (rich text)."""
    if info is None:
        return (
            "The memory estimate needs a loaded model: load one to see how much memory "
            "these settings take."
        )
    memory = settings.memory_estimate(info)
    if not info.n_layer or not (info.n_embd_k_gqa or info.n_embd_v_gqa or memory.recurrent_bytes):
        return "This model's file does not describe its layers, so no estimate is possible."
    n_ctx = settings.effective_n_ctx(info)
    per_token = settings.kv_bytes_per_token(info)
    total = settings.kv_bytes(info)
    lines = [
        f"<b>{format_bytes(total)}</b> for {n_ctx:,} tokens ({format_bytes(per_token)} per token)."
        if per_token
        else "No attention layers: this model keeps no per-token cache."
    ]
    if memory.recurrent_bytes:
        n_seq = max(1, settings.n_seq_max)
        lines.append(
            f"Recurrent state: <b>{format_bytes(memory.recurrent_bytes)}</b> "
            f"({format_bytes(memory.recurrent_bytes // n_seq)} for each of {n_seq} resident "
            "tabs, whatever their length)."
        )
    if memory.checkpoint_bytes:
        lines.append(
            f"Checkpoints at message boundaries (so edits and regenerations need not "
            f"re-read the chat): up to {format_bytes(memory.checkpoint_bytes)}."
        )
    if settings.n_ctx == 0:
        lines.append(f"Context size 0 uses the model's {n_ctx:,} tokens.")
    elif n_ctx < settings.n_ctx:
        lines.append(
            f"The model was trained for {n_ctx:,} tokens: the context is held to that "
            "(positions past it give garbage, not a longer memory) unless RoPE scaling "
            "is on."
        )
    n_seq = max(1, settings.n_seq_max)
    if settings.kv_unified:
        lines.append(
            f"All {n_seq} resident tabs share this pool; a long conversation may use most of it."
            if n_seq > 1
            else "The one resident tab has this pool to itself."
        )
    else:
        share = n_ctx // n_seq
        lines.append(
            f"Split cache: each of the {n_seq} resident tabs gets {share:,} tokens "
            f"({format_bytes(per_token * share)})."
        )
    if info.size_bytes:
        lines.append(f"The model's weights add {format_bytes(info.size_bytes)}.")
    return "<br>".join(lines)


def tokens(n: int) -> str:
    return f"{n:,} token{'s' if n != 1 else ''}"


def running_text(
    loaded: LoadedModel | None,
    baseline: ContextSettings,
    edited: ContextSettings,
    info: ModelInfo | None,
) -> str:
    """What the model runs at now and, when the context size is being changed, what the new
    value would give; ``""`` when there is nothing to say (no model at all)."""
    parts: list[str] = []
    if loaded is not None:
        actual, asked = loaded.n_ctx, loaded.settings.n_ctx
        train = loaded.info.n_ctx_train
        limit = f"its training limit is {train:,}" if train else "its training limit is unknown"
        if asked == 0:
            parts.append(f"The model runs at {tokens(actual)}: {limit}.")
        elif actual < asked:
            why = (
                f"its training limit is {train:,} (RoPE scaling would stretch it)"
                if train and actual >= train
                else "llama.cpp gave it less"
            )
            parts.append(
                f"The model runs at <b>{tokens(actual)}</b>, not the {asked:,} asked for: {why}."
            )
        elif actual > asked:
            parts.append(
                f"The model runs at {tokens(actual)} (llama.cpp rounds the {asked:,} asked "
                f"for up to a multiple of 256; {limit})."
            )
        else:
            parts.append(f"The model runs at {tokens(actual)} ({limit}).")
        if not loaded.settings.kv_unified and loaded.settings.n_seq_max > 1:
            parts.append(f"Each resident tab gets {loaded.n_ctx_seq:,} of them (split cache).")
    if info is not None and (
        edited.n_ctx != baseline.n_ctx or edited.rope_scaled != baseline.rope_scaled
    ):
        will = edited.effective_n_ctx(info)
        if edited.n_ctx == 0:
            parts.append(f"Applying 0 gives the model's own length, {tokens(will)}.")
        elif will < edited.n_ctx:
            parts.append(
                f"Applying {edited.n_ctx:,} would give {tokens(will)}: the model's training "
                "limit (turn on RoPE scaling to go past it)."
            )
        elif loaded is not None:
            parts.append(f"Applying gives {tokens(will)}.")
    return " ".join(parts)


def applied_text(model: LoadedModel) -> str:
    """The sentence after a successful Apply: the context the model really got."""
    settings = model.settings
    n_seq = settings.n_seq_max
    tabs = f"{n_seq} resident tab{'s' if n_seq != 1 else ''}"
    share = (
        f"shared by {tabs}"
        if settings.kv_unified or n_seq == 1
        else f"{model.n_ctx_seq:,} for each of {tabs}"
    )
    text = f"Applied: the model now runs with a {model.n_ctx:,}-token context ({share})"
    asked = settings.n_ctx
    if asked and model.n_ctx < asked:
        text += f", not the {asked:,} asked for: that is as far as this model goes"
    return (
        f"{text}, {settings.n_threads} generation thread"
        f"{'s' if settings.n_threads != 1 else ''}. Every open tab was kept."
    )
