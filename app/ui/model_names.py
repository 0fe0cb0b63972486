"""A model's name as the window shows it, for a local file and a remote model alike."""

from __future__ import annotations

from pathlib import PurePath

from app.remote.saved import parse_address


def model_file_name(path: str) -> str:
    """The file name of a local model's path; for a remote model (a ``remote://``
    address, its id quoted) the id, cut to its file name when the server names it by a
    path (a LlamaDesk or llama-server id is the file it serves), never the quoted form."""
    parsed = parse_address(path)
    if parsed is None:
        return PurePath(path).name
    model = parsed[1]
    if model.lower().endswith(".gguf") or model.startswith(("/", "\\")) or ":\\" in model[:3]:
        return PurePath(model.replace("\\", "/")).name or model
    return model
