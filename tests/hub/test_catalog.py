"""The curated catalog loads, and its entries resolve against the Hub's LFS metadata."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.hub import catalog
from app.hub.client import HubClient
from tests.hub.fake_hub import FakeHub


def test_bundled_catalog_loads() -> None:
    models = catalog.load()
    assert len(models) >= 5
    assert all(m.file.endswith(".gguf") and "/" in m.repository and m.good_at for m in models)
    assert {m.quant for m in models} - {"unknown"}


def test_resolve_fills_size_and_sha(hub: FakeHub, client: HubClient, tiny_gguf: Path) -> None:
    model = catalog.load()[0]
    hub.add_repo(model.repository)
    published = hub.add_file(model.repository, model.file, tiny_gguf)
    resolved, entry = catalog.resolve(model, client)
    assert resolved.sha256 == published.sha256 and resolved.size == published.size
    assert entry.name == model.file


def test_wrong_catalog_hash_is_refused(
    hub: FakeHub, client: HubClient, tiny_gguf: Path, tmp_path: Path
) -> None:
    hub.add_repo("a/b")
    hub.add_file("a/b", "m-Q4_K_M.gguf", tiny_gguf)
    path = tmp_path / "catalog.json"
    entry = {
        "name": "M",
        "repository": "a/b",
        "file": "m-Q4_K_M.gguf",
        "size": None,
        "sha256": "0" * 64,
        "good_at": "x",
    }
    path.write_text(json.dumps({"format": "llamadesk-catalog", "models": [entry]}))
    (model,) = catalog.load(path)
    with pytest.raises(catalog.CatalogError, match="differs from the Hub"):
        catalog.resolve(model, client)
    entry["file"] = "../x.gguf"
    path.write_text(json.dumps({"format": "llamadesk-catalog", "models": [entry]}))
    with pytest.raises(Exception, match="not allowed"):
        catalog.load(path)
