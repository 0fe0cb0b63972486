"""The sampling fields (how the next token is picked: per reply, per chat) and their
parameters on the API server."""

from __future__ import annotations

from typing import Any

from app.settings_schema.field_spec import Apply, CliOption, FieldSpec, Special
from app.settings_schema.llama_values import CTX_MAX


def _sampling_fields() -> tuple[FieldSpec, ...]:
    n = Apply.NEXT_REPLY
    return (
        FieldSpec(
            "temperature",
            "Temperature",
            "Randomness: 0 always picks the likeliest token (greedy), higher is more varied.",
            "float",
            default=0.8,
            minimum=0.0,
            maximum=5.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--temp",), "T"),
        ),
        FieldSpec(
            "top_k",
            "Top-k",
            "Sample only among the k likeliest tokens (0: no limit).",
            "int",
            default=40,
            minimum=0,
            maximum=100_000,
            unit="tokens",
            apply=n,
            chat=True,
            cli=CliOption(("--top-k",), "K"),
        ),
        FieldSpec(
            "top_p",
            "Top-p",
            "Sample among the likeliest tokens whose probabilities add up to p (1: off).",
            "float",
            default=0.95,
            minimum=0.0,
            maximum=1.0,
            apply=n,
            step=0.01,
            decimals=2,
            chat=True,
            cli=CliOption(("--top-p",), "P"),
        ),
        FieldSpec(
            "min_p",
            "Min-p",
            "Drop tokens less likely than this fraction of the likeliest one (0: off).",
            "float",
            default=0.05,
            minimum=0.0,
            maximum=1.0,
            apply=n,
            step=0.01,
            decimals=2,
            chat=True,
            cli=CliOption(("--min-p",), "P"),
        ),
        FieldSpec(
            "repeat_penalty",
            "Repeat penalty",
            "Above 1 discourages repeating recent tokens (1: off).",
            "float",
            default=1.0,
            minimum=0.01,
            maximum=5.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--repeat-penalty",), "R"),
        ),
        FieldSpec(
            "repeat_last_n",
            "Repeat window",
            "How many recent tokens the repeat, frequency and presence penalties look at.",
            "int",
            default=64,
            minimum=0,
            maximum=CTX_MAX,
            special=Special(-1, "Whole context"),
            unit="tokens",
            apply=n,
            cli=CliOption(("--repeat-last-n",), "N"),
        ),
        FieldSpec(
            "frequency_penalty",
            "Frequency penalty",
            "Discourages tokens in proportion to how often they appeared (0: off).",
            "float",
            default=0.0,
            minimum=-2.0,
            maximum=2.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--frequency-penalty",), "F"),
        ),
        FieldSpec(
            "presence_penalty",
            "Presence penalty",
            "Discourages tokens that appeared at all (0: off).",
            "float",
            default=0.0,
            minimum=-2.0,
            maximum=2.0,
            apply=n,
            step=0.05,
            decimals=2,
            chat=True,
            cli=CliOption(("--presence-penalty",), "P"),
        ),
        FieldSpec(
            "seed",
            "Seed",
            "The same seed and settings give the same reply; -1 picks a new one each time.",
            "int",
            default=-1,
            minimum=0,
            maximum=2**31 - 1,
            special=Special(-1, "Random"),
            apply=n,
            chat=True,
            cli=CliOption(("--seed",), "S"),
        ),
        FieldSpec(
            "max_tokens",
            "Max tokens",
            "The longest reply, in tokens.",
            "int",
            default=1024,
            minimum=1,
            maximum=1_000_000,
            special=Special(-1, "No limit"),
            unit="tokens",
            apply=n,
            step=16,
            chat=True,
            cli=CliOption(("-n", "--n-predict"), "N", default=128),
        ),
        FieldSpec(
            "stop",
            "Stop strings",
            "The reply ends where one of these appears (not included).",
            "text_list",
            default=[],
            apply=n,
            # a conversation setting: the chat tab edits it (app/ui/tab_stop_strings.py)
            chat=True,
            cli=CliOption(("--stop",), "TEXT", note="Repeatable."),
        ),
        FieldSpec(
            "grammar",
            "Grammar",
            "A GBNF grammar the reply must follow (none: free text).",
            "text",
            default=None,
            apply=n,
        ),
    )


SAMPLING_FIELDS: dict[str, FieldSpec] = {spec.name: spec for spec in _sampling_fields()}


def api_parameters() -> list[dict[str, Any]]:
    """The sampling fields as request parameters (JSON name, type, range, default,
    description), for the API server to accept and validate."""
    return [spec.api_parameter() for spec in SAMPLING_FIELDS.values()]
