"""Model library: folders, metadata cache, errors from the injected reader, presets."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from app.storage import Database, StorageError


class Reader:
    """A fake metadata reader that counts calls and fails for files named broken*."""

    def __init__(self) -> None:
        self.calls: list[Path] = []

    def __call__(self, path: Path) -> dict[str, Any]:
        self.calls.append(path)
        if path.name.startswith("broken"):
            raise ValueError(f"bad GGUF magic in {path.name}")
        return {"general.name": path.stem, "size": path.stat().st_size, "arch": "llama"}


def _make_models(folder: Path, n: int) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for i in range(n):
        p = folder / f"model-{i:02d}.gguf"
        p.write_bytes(b"GGUF" + bytes([i]) * (10 + i))
        files.append(p)
    return files


def test_rescan_of_unchanged_folder_reads_no_file(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    files = _make_models(folder, 50)
    (folder / "notes.txt").write_text("not a model")
    sub = folder / "sub"
    sub.mkdir()
    (sub / "Nested.GGUF").write_bytes(b"GGUF nested")
    (folder / "big-00001-of-00002.gguf").write_bytes(b"GGUF part 1")
    (folder / "big-00002-of-00002.gguf").write_bytes(b"GGUF part 2")
    assert db.add_folder(folder) == str(folder)
    assert db.add_folder(folder) == str(folder)  # idempotent
    assert db.list_folders() == [str(folder)]
    reader = Reader()
    result = db.scan(reader)
    assert len(result.added) == 52 and result.metadata_reads == 52 and not result.errors
    assert str(folder / "big-00002-of-00002.gguf") not in result.added
    models = {m.path: m for m in db.list_models()}
    assert models[str(files[3])].metadata == {
        "general.name": "model-03",
        "size": 17,
        "arch": "llama",
    }
    assert models[str(files[3])].name == "model-03.gguf" and models[str(files[3])].folder == str(
        folder
    )

    reader2 = Reader()
    again = db.scan(reader2)
    assert reader2.calls == [] and again.unchanged == 52 and again.metadata_reads == 0
    # A fresh connection (app restart) uses the same cache.
    with db.clone() as other:
        reader3 = Reader()
        assert other.scan(reader3).unchanged == 52 and reader3.calls == []

    # Changed size or mtime -> read again; a deleted file disappears.
    files[0].write_bytes(b"GGUF changed and longer")
    st = files[1].stat()
    os.utime(files[1], ns=(st.st_atime_ns, st.st_mtime_ns + 5_000_000_000))
    files[2].unlink()
    reader4 = Reader()
    changed = db.scan(reader4)
    assert sorted(changed.updated) == sorted([str(files[0]), str(files[1])])
    assert changed.removed == [str(files[2])] and changed.unchanged == 49
    assert sorted(reader4.calls) == sorted([files[0], files[1]])


def test_reader_errors_are_recorded_per_file(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "m"
    _make_models(folder, 2)
    (folder / "broken.gguf").write_bytes(b"XXXX")
    db.add_folder(folder)
    result = db.scan(Reader())
    assert list(result.errors) == [str(folder / "broken.gguf")]
    assert "bad GGUF magic" in result.errors[str(folder / "broken.gguf")]
    entries = {Path(m.path).name: m for m in db.list_models()}
    assert entries["broken.gguf"].error is not None and entries["broken.gguf"].metadata is None
    assert entries["model-00.gguf"].error is None and entries["model-00.gguf"].metadata
    reader = Reader()
    db.scan(reader)
    assert reader.calls == []  # a broken, unchanged file is not retried either


def test_missing_folder_keeps_its_models(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "usb"
    _make_models(folder, 3)
    db.add_folder(folder)
    db.scan(Reader())
    folder.rename(tmp_path / "unplugged")
    result = db.scan(Reader())
    assert result.missing_folders == [str(folder)] and result.removed == []
    assert len(db.list_models()) == 3
    db.remove_folder(folder)
    assert db.list_folders() == [] and db.list_models() == []


def test_single_files_last_used_and_presets(db: Database, tmp_path: Path) -> None:
    a, b = _make_models(tmp_path / "loose", 2)
    reader = Reader()
    entry = db.add_model_file(a, reader)
    assert entry.path == str(a) and entry.folder is None and len(reader.calls) == 1
    db.add_model_file(a, reader)
    assert len(reader.calls) == 1  # cached
    db.add_model_file(b, reader)
    db.mark_used(b)
    assert [m.path for m in db.list_models()] == [str(b), str(a)]
    assert db.get_model(b).last_used is not None
    assert db.scan(reader).unchanged == 2  # loose files are re-checked by scan
    b.unlink()
    assert db.scan(reader).removed == [str(b)]
    with pytest.raises(StorageError, match="does not exist"):
        db.add_model_file(tmp_path / "nope.gguf", reader)

    p1 = db.save_preset(a, "long context", {"n_ctx": 32768, "flash_attn": True})
    assert p1.settings == {"n_ctx": 32768, "flash_attn": True}
    db.save_preset(a, "small", {"n_ctx": 2048})
    db.save_preset(a, "small", {"n_ctx": 4096})  # replace
    assert [(p.name, p.settings) for p in db.get_presets(a)] == [
        ("long context", {"flash_attn": True, "n_ctx": 32768}),
        ("small", {"n_ctx": 4096}),
    ]
    db.delete_preset(a, "small")
    assert [p.name for p in db.get_presets(str(a))] == ["long context"]
    with pytest.raises(StorageError):
        db.save_preset(a, "  ", {})
    db.remove_model(a)
    assert db.get_presets(a)  # presets outlive the cache entry


def test_entries_cached_by_an_older_reader_are_read_again(db: Database, tmp_path: Path) -> None:
    folder = tmp_path / "models"
    _make_models(folder, 3)
    db.add_folder(folder)
    reader = Reader()
    db.scan(reader)
    assert len(reader.calls) == 3
    # As a database written before the reader refused unloadable files would have it.
    with db.transaction() as conn:
        conn.execute("UPDATE model_files SET reader = 0 WHERE path LIKE '%model-01%'")
    again = Reader()
    result = db.scan(again)
    assert [p.name for p in again.calls] == ["model-01.gguf"]
    assert result.unchanged == 2 and len(result.updated) == 1
    assert db.scan(Reader()).unchanged == 3
