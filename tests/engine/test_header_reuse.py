"""A model load reads its file's header several times; the parse is reused only for the
very same bytes (app/engine/gguf_header.py: ``read_header``)."""

from __future__ import annotations

import os
from pathlib import Path

from app.engine.gguf_header import read_header
from tests.support.gguf_models import write_tiny_model


def test_the_same_file_is_parsed_once(tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path / "m.gguf")
    first = read_header(path)
    assert read_header(path) is first
    assert read_header(Path(os.path.relpath(path))) is first  # another name, same bytes


def test_a_file_rewritten_in_place_with_the_same_size_is_read_again(tmp_path: Path) -> None:
    path = write_tiny_model(tmp_path / "m.gguf")
    stat = path.stat()
    first = read_header(path)
    assert first.get("general.name") == "tiny-test-llama"
    data = path.read_bytes()
    assert data.count(b"tiny-test-llama") == 1
    path.write_bytes(data.replace(b"tiny-test-llama", b"tiny-test-alpac"))
    # same size, and the time put back: only the bytes say that it changed
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    again = read_header(path)
    assert again is not first
    assert again.get("general.name") == "tiny-test-alpac"
    assert again.digest() != first.digest()


def test_another_file_of_the_same_size_is_parsed_for_itself(tmp_path: Path) -> None:
    a = write_tiny_model(tmp_path / "a.gguf")
    b = tmp_path / "b.gguf"
    b.write_bytes(a.read_bytes().replace(b"tiny-test-llama", b"tiny-test-other"))
    assert read_header(a).get("general.name") == "tiny-test-llama"
    assert read_header(b).get("general.name") == "tiny-test-other"
    assert read_header(a).get("general.name") == "tiny-test-llama"
