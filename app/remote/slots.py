"""A conversation's cache as a llama-server slot file (``--slot-save-path``).

llama-server saves a slot's cache to a file of that folder (``POST /slots/{id}?action=save``)
and restores one into a slot (``action=restore``); without ``--slot-save-path`` both answer
501. The session keeps a remote conversation's "state" as it keeps a local one (the
:class:`~app.storage.StateStore`, under the engine's fingerprint: this server and model),
but what it keeps is only the slot file's name (:class:`SlotFile`, a few bytes of JSON):
the cache stays on the server. A conversation keeps one file name while it lives (a
restore takes the saved one over), so saving again overwrites it.

:func:`probe_slot_files` asks with an action that does not exist: 501 means no slot
files, 400 ("Invalid action") means the server has them; nothing is saved or erased.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

import httpx2

from app.errors import LlamaDeskError
from app.remote.connection import RemoteConnection

SLOT_ACTION_TIMEOUT_S = 120.0  # a big slot is written or read in that time
# a server that does not take the connection is given up sooner than for a turn: the
# window saves every tab's slot as it closes
SLOT_CONNECT_TIMEOUT_S = 3.0


class SlotServerDown(LlamaDeskError):
    """The server did not take the slot request (the next ones are not tried for now)."""


PROBE_ACTION = "llamadesk-probe"  # no such action: answered before any work is done
MAGIC = "llama-server-slot"


@dataclass(frozen=True)
class SlotFile:
    """What the session stores for a remote conversation's cache."""

    name: str  # the file in the server's --slot-save-path
    n_tokens: int

    def to_bytes(self) -> bytes:
        return json.dumps({"kind": MAGIC, "file": self.name, "n_tokens": self.n_tokens}).encode()

    @classmethod
    def of(cls, data: bytes) -> SlotFile | None:
        """None for bytes that are no slot file's record (another engine's state)."""
        try:
            raw = json.loads(data.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
        if not isinstance(raw, dict) or raw.get("kind") != MAGIC:
            return None
        name, n = raw.get("file"), raw.get("n_tokens")
        if not isinstance(name, str) or not name or not isinstance(n, int):
            return None
        return cls(name, n)


def new_name() -> str:
    return f"llamadesk-{uuid.uuid4().hex}.bin"


def probe_slot_files(client: httpx2.Client, conn: RemoteConnection) -> bool:
    """Whether the server keeps slot files (see the module docstring)."""
    try:
        response = client.post(
            f"{conn.root}/slots/0",
            params={"action": PROBE_ACTION},
            json={"filename": "none.bin"},
            timeout=httpx2.Timeout(10.0, connect=conn.connect_timeout_s),
        )
    except httpx2.HTTPError:
        return False
    return response.status_code == 400


def _action(
    client: httpx2.Client, conn: RemoteConnection, slot: int, action: str, name: str
) -> dict[str, object]:
    what = "saved" if action == "save" else "restored"
    try:
        response = client.post(
            f"{conn.root}/slots/{slot}",
            params={"action": action},
            json={"filename": name},
            timeout=httpx2.Timeout(
                SLOT_ACTION_TIMEOUT_S, connect=min(conn.connect_timeout_s, SLOT_CONNECT_TIMEOUT_S)
            ),
        )
    except httpx2.HTTPError as exc:
        raise SlotServerDown(
            f"The cache on {conn.label} could not be {what} ({type(exc).__name__})."
        ) from None
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code != 200 or not isinstance(body, dict):
        error = body.get("error") if isinstance(body, dict) else None
        message = error.get("message") if isinstance(error, dict) else None
        raise LlamaDeskError(
            f"The cache on {conn.label} could not be {what}: "
            f"{message or f'HTTP {response.status_code}'}."
        )
    return body


def save_slot(client: httpx2.Client, conn: RemoteConnection, slot: int, name: str) -> SlotFile:
    body = _action(client, conn, slot, "save", name)
    n = body.get("n_saved")
    return SlotFile(name, n if isinstance(n, int) else 0)


def restore_slot(client: httpx2.Client, conn: RemoteConnection, slot: int, name: str) -> int:
    """The tokens the slot holds now."""
    body = _action(client, conn, slot, "restore", name)
    n = body.get("n_restored")
    return n if isinstance(n, int) else 0
