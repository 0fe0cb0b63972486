"""The command line's flags for the settings schema's fields (:mod:`app.settings_schema`):
their names, help texts, ranges and defaults come from the schema, one source for ``run``,
``serve``, ``bench``, ``models`` and ``inspect --fit``.
"""

from __future__ import annotations

import argparse
from typing import Any

from app.settings_schema import (
    CONTEXT_FIELDS,
    DEVICE_FIELDS,
    MISSING,
    MODEL_FIELDS,
    SAMPLING_FIELDS,
    FieldSpec,
)

# The schema fields each command takes as flags (names, help and ranges from the schema).
RUN_SAMPLING = tuple(s for s in SAMPLING_FIELDS.values() if s.cli is not None)
RUN_CONTEXT = tuple(CONTEXT_FIELDS[name] for name in ("n_ctx", "n_batch", "n_threads"))
BENCH_CONTEXT = (CONTEXT_FIELDS["n_threads"],)
BENCH_SPEC = (SAMPLING_FIELDS["speculative"], SAMPLING_FIELDS["draft_max"])
RUN_MODEL = (MODEL_FIELDS["chat_template"],)  # run and serve: --chat-template NAME|FILE
RUN_DEVICES = tuple(s for s in DEVICE_FIELDS.values() if s.cli is not None)


def cli_dest(spec: FieldSpec) -> str:
    """The ``argparse`` attribute of a schema field's flag (``--temp`` -> ``temp``)."""
    assert spec.cli is not None, spec.name
    long = next((f for f in spec.cli.flags if f.startswith("--")), spec.cli.flags[0])
    return long.lstrip("-").replace("-", "_")


def cli_flag(spec: FieldSpec) -> str:
    return "/".join(spec.cli.flags) if spec.cli is not None else spec.name


def cli_help(spec: FieldSpec) -> str:
    """The schema's help text, valid range, unit and the flag's default."""
    assert spec.cli is not None, spec.name
    parts = [spec.help]
    if spec.cli.note:
        parts.append(spec.cli.note)
    if spec.range_text():
        parts.append(f"Valid: {spec.range_text()}{f' {spec.unit}' if spec.unit else ''}.")
    default = spec.default_value() if spec.cli.default is MISSING else spec.cli.default
    if default is not None and default != []:
        parts.append(f"(default {default})")
    return " ".join(parts).replace("%", "%%")


def add_schema_args(parser: Any, specs: tuple[FieldSpec, ...]) -> None:
    """One flag per schema field: its names, metavar, type, default and help."""
    for spec in specs:
        cli = spec.cli
        assert cli is not None, spec.name
        kwargs: dict[str, Any] = {"dest": cli_dest(spec), "metavar": cli.metavar}
        kwargs["help"] = cli_help(spec)
        default = spec.default_value() if cli.default is MISSING else cli.default
        if spec.kind == "text_list":
            kwargs.update(action="append", default=list(default or []))
        elif spec.kind in ("int", "float", "text"):
            kwargs.update(
                type={"int": int, "float": float, "text": str}[spec.kind], default=default
            )
        elif spec.kind == "choice":
            kwargs.update(choices=list(spec.choice_values()), default=default)
        else:
            raise ValueError(f"no command-line form for the {spec.kind} field {spec.name}")
        parser.add_argument(*cli.flags, **kwargs)


def add_device_args(parser: Any, title: str = "devices (see `llamadesk devices`)") -> None:
    """The device flags of run, serve, bench, models and inspect --fit: one source."""
    add_schema_args(parser.add_argument_group(title), RUN_DEVICES)


def schema_values(args: argparse.Namespace, specs: tuple[FieldSpec, ...]) -> dict[str, Any]:
    """The schema fields given on the command line (a ``None`` default: not given)."""
    values = {spec.name: getattr(args, cli_dest(spec)) for spec in specs}
    return {name: value for name, value in values.items() if value is not None}
