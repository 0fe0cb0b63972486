"""A key the keyring refused (locked) and that went to the owner-only file wins over an
older key the keyring still holds (issue 27 review, item 11). The keyring is the real
``keyring`` library with a backend of this test's own: a secret store that can be locked,
as a desktop keyring is when the user dismissed its unlock prompt."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import keyring  # type: ignore[import-not-found, unused-ignore]
import pytest
from jaraco.classes import properties
from keyring.backend import KeyringBackend  # type: ignore[import-not-found, unused-ignore]
from keyring.errors import (  # type: ignore[import-not-found, unused-ignore]
    PasswordDeleteError,
    PasswordSetError,
)

from app.keyring_backend import system_keyring
from app.remote.saved import ApiKeys


class LockableKeyring(KeyringBackend):
    # keyring offers every backend class it knows (its subclasses) when it picks one for a
    # process: this one is never picked, only set by the store fixture.
    @properties.classproperty
    def priority(cls) -> float:
        raise RuntimeError("only the store fixture uses this keyring")

    def __init__(self) -> None:
        # (KeyringBackend.__init__ only reads KEYRING_PROPERTY_* variables, and is untyped)
        self.secrets: dict[tuple[str, str], str] = {}
        self.locked = False

    def get_password(self, service: str, username: str) -> str | None:
        return self.secrets.get((service, username))

    def set_password(self, service: str, username: str, password: str) -> None:
        if self.locked:
            raise PasswordSetError("the keyring is locked")
        self.secrets[(service, username)] = password

    def delete_password(self, service: str, username: str) -> None:
        if self.locked or (service, username) not in self.secrets:
            raise PasswordDeleteError("the keyring is locked or holds no such key")
        del self.secrets[(service, username)]


@pytest.fixture
def store(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[LockableKeyring]:
    monkeypatch.setenv("LLAMADESK_HOME", str(tmp_path / "data"))
    before = keyring.get_keyring()
    backend = LockableKeyring()
    keyring.set_keyring(backend)
    # system_keyring() is found once a process: forget this test's keyring on both sides,
    # or later tests of this process would see a keyring where the machine has none.
    system_keyring.cache_clear()
    yield backend
    keyring.set_keyring(before)
    system_keyring.cache_clear()


def test_a_key_the_locked_keyring_refused_wins_over_its_older_one(
    store: LockableKeyring,
) -> None:
    keys = ApiKeys()
    assert keys.where() == "the system keyring"
    keys.set("gpu-box", "sk-old")
    assert keys.get("gpu-box") == "sk-old" and not keys.path.exists()
    store.locked = True
    keys.set("gpu-box", "sk-new")  # refused: kept in the owner-only file
    assert ApiKeys().get("gpu-box") == "sk-new"  # also after a restart
    store.locked = False
    keys.set("gpu-box", "sk-newer")  # the keyring takes it: the file's copy goes
    assert ApiKeys().get("gpu-box") == "sk-newer"
    assert "gpu-box" not in keys.path.read_text(encoding="utf-8")
