"""The system keyring, where secrets live (the Hub token, remote engines' API keys, MCP
servers' secret values): the ``keyring`` module when it has a real backend, else None, and
each store then falls back as its module says (an owner-only file, or memory)."""

from __future__ import annotations

import functools
from typing import Any


@functools.cache  # the backend is found once a process (keyring scans its entry points)
def system_keyring() -> Any | None:
    """The keyring module if it is installed and has a usable backend, else None."""
    try:
        import keyring  # type: ignore[import-not-found, unused-ignore]
        from keyring.backends import fail  # type: ignore[import-not-found, unused-ignore]

        # Without a secret service (a headless machine), keyring picks its "fail"
        # backend, whose every call raises: treat it as no keyring.
        if isinstance(keyring.get_keyring(), fail.Keyring):
            return None
    except Exception:  # a broken backend must not take a settings page down
        return None
    return keyring
