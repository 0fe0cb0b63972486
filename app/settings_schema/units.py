"""How the app writes sizes and numbers for people: one byte formatter, one number format."""

from __future__ import annotations


def format_bytes(n: float) -> str:
    """``1536`` -> ``"1.50 KiB"``: binary units (KiB, MiB, GiB, TiB), as memory is counted.

    The one byte formatter of the app (the settings panel, the status bar, the model manager).
    """
    value = float(n)
    if abs(value) < 1024:
        return f"{int(value)} bytes"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        value /= 1024
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:.2f} {unit}" if abs(value) < 10 else f"{value:.1f} {unit}"
    raise AssertionError("unreachable")  # pragma: no cover


def format_number(value: float) -> str:
    """``262144`` -> ``"262,144"``, ``2.0`` -> ``"2"``, ``0.05`` -> ``"0.05"``: the numbers
    of the schema's ranges and messages (thousands separated from 100,000 on)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 100_000 else str(value)
    return f"{value:g}"
