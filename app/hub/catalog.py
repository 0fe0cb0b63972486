"""The curated first-start list (``resources/catalog.json``).

Sizes and SHA-256 may be null in the file: :func:`resolve` reads them from the Hub's file
tree (LFS metadata), and a download always verifies against what the Hub publishes; a
catalog value that disagrees with the Hub is refused rather than trusted either way.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from app import paths
from app.hub.client import GGUFEntry, HubClient
from app.hub.errors import HubError
from app.hub.files import check_repo_path, quantization


@dataclass(frozen=True)
class CatalogModel:
    name: str
    repository: str
    file: str
    params: str
    good_at: str
    size: int | None
    sha256: str | None

    @property
    def quant(self) -> str:
        return quantization(self.file)


class CatalogError(HubError):
    pass


def catalog_path() -> Path:
    return paths.resources_dir() / "catalog.json"


def load(path: Path | None = None) -> list[CatalogModel]:
    source = path or catalog_path()
    try:
        data: Any = json.loads(source.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise CatalogError(f"The model catalog {source} cannot be read ({exc}).") from exc
    if not isinstance(data, dict) or data.get("format") != "llamadesk-catalog":
        raise CatalogError(f"{source} is not a LlamaDesk model catalog.")
    out: list[CatalogModel] = []
    for i, item in enumerate(data.get("models") or []):
        try:
            size, sha = item.get("size"), item.get("sha256")
            model = CatalogModel(
                name=str(item["name"]),
                repository=str(item["repository"]),
                file=check_repo_path(str(item["file"])),
                params=str(item.get("params") or ""),
                good_at=str(item.get("good_at") or ""),
                size=int(size) if size is not None else None,
                sha256=str(sha).lower() if sha is not None else None,
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CatalogError(f"Entry {i + 1} of the model catalog is invalid ({exc}).") from exc
        if model.repository.count("/") != 1 or not model.file.lower().endswith(".gguf"):
            raise CatalogError(f"Entry {i + 1} of the model catalog is invalid.")
        if model.sha256 is not None and len(model.sha256) != 64:
            raise CatalogError(f"Entry {i + 1} of the model catalog has a malformed SHA-256.")
        out.append(model)
    return out


def resolve(model: CatalogModel, client: HubClient) -> tuple[CatalogModel, GGUFEntry]:
    """The entry to download, with size and SHA-256 from the Hub."""
    details = client.details(model.repository)
    found = details.find(filename=model.file)
    if not found:
        raise CatalogError(f"{model.repository} no longer has {model.file}.")
    entry = found[0]
    remote = next(f for f in entry.files if f.path == model.file or f.path.endswith(model.file))
    for known, published, what in (
        (model.size, remote.size, "size"),
        (model.sha256, remote.sha256, "SHA-256"),
    ):
        if known is not None and published is not None and known != published:
            raise CatalogError(
                f"The catalog's {what} of {model.file} differs from the Hub's: it is not downloaded."
            )
    return replace(model, size=entry.size, sha256=remote.sha256), entry
