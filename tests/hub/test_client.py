"""Search, repository details and fit verdicts against the fake Hub."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from app.hub import fit
from app.hub.client import GGUFEntry, HubClient, RemoteFile, group_files
from app.hub.errors import HubError, NoGGUFFilesError
from app.hub.files import quantization, split_name
from tests.hub.fake_hub import FakeHub


def _populate(hub: FakeHub, model: Path) -> None:
    hub.add_repo("acme/Tiny-GGUF", downloads=500, likes=3, last_modified="2025-03-01T00:00:00Z")
    for name in ("tiny-Q4_K_M.gguf", "tiny-Q8_0.gguf", "tiny-IQ4_XS.gguf", "mmproj-tiny-F16.gguf"):
        hub.add_file("acme/Tiny-GGUF", name, model)
    hub.add_file("acme/Tiny-GGUF", "README.md", model, lfs=False)
    hub.add_repo("acme/Big-GGUF", downloads=100, likes=9, license="llama3.2", gated="manual")
    for i in (1, 2, 3):
        hub.add_file("acme/Big-GGUF", f"F16/big-F16-0000{i}-of-00003.gguf", model)
    hub.add_repo("acme/safetensors-only", tags=["transformers"])
    hub.add_file("acme/safetensors-only", "model.safetensors", model)
    hub.add_repo("acme/NoGGUF", downloads=1, tags=["gguf"])
    hub.add_file("acme/NoGGUF", "model.safetensors", model)


def test_quantization_labels() -> None:
    cases = {
        "Qwen3-0.6B-Q8_0.gguf": "Q8_0",
        "Llama-3.2-1B-Instruct-Q4_K_M.gguf": "Q4_K_M",
        "m-IQ4_XS.gguf": "IQ4_XS",
        "m.F16.gguf": "F16",
        "gemma-3-1b-it-BF16.gguf": "BF16",
        "smollm2-1.7b-instruct-q4_k_m.gguf": "Q4_K_M",
        "Q4_K_M/m-00001-of-00002.gguf": "Q4_K_M",
        "m-UD-Q4_K_XL.gguf": "Q4_K_XL",
        "model.gguf": "unknown",
    }
    assert {name: quantization(name) for name in cases} == cases
    assert split_name("m-Q4_K_M-00002-of-00003.gguf") is not None
    assert split_name("m-Q4_K_M.gguf") is None


def test_search_sorts_and_filters(hub: FakeHub, client: HubClient, tiny_gguf: Path) -> None:
    _populate(hub, tiny_gguf)
    by_downloads = client.search("", sort="downloads")
    assert [r.repo_id for r in by_downloads] == ["acme/Tiny-GGUF", "acme/Big-GGUF", "acme/NoGGUF"]
    assert next(r.repo_id for r in client.search("gguf", sort="likes")) == "acme/Big-GGUF"
    assert [r.repo_id for r in client.search("tiny", sort="last_modified")] == ["acme/Tiny-GGUF"]
    big = next(r for r in by_downloads if r.repo_id == "acme/Big-GGUF")
    assert big.gated == "manual" and big.license == "llama3.2" and big.likes == 9
    seen = [r for r in hub.requests if r.path.startswith("/api/models?")]
    assert seen and all("filter=gguf" in r.path for r in seen)


def test_details_group_by_quant_with_splits(
    hub: FakeHub, client: HubClient, tiny_gguf: Path
) -> None:
    _populate(hub, tiny_gguf)
    size = tiny_gguf.stat().st_size
    details = client.details("acme/Tiny-GGUF")
    assert sorted(details.by_quant()) == ["IQ4_XS", "Q4_K_M", "Q8_0"]
    assert [p.path for p in details.projectors] == ["mmproj-tiny-F16.gguf"]
    assert details.license == "apache-2.0" and details.gated is False
    assert all(e.files[0].sha256 and len(e.files[0].sha256) == 64 for e in details.entries)
    big = client.details("acme/Big-GGUF")
    (entry,) = big.entries
    assert entry.quant == "F16" and entry.is_split and entry.size == 3 * size
    assert entry.name == "F16/big-F16-00001-of-00003.gguf"
    assert big.gated == "manual"


def test_incomplete_split_is_not_an_entry() -> None:
    files = [RemoteFile(f"m-Q8_0-0000{i}-of-00003.gguf", 10, None) for i in (1, 3)]
    entries, _, incomplete = group_files([*files, RemoteFile("x-Q2_K.gguf", 5, None)])
    assert [e.name for e in entries] == ["x-Q2_K.gguf"] and incomplete == ["m-Q8_0 (2 of 3 parts)"]


def test_repository_without_gguf(hub: FakeHub, client: HubClient, tiny_gguf: Path) -> None:
    _populate(hub, tiny_gguf)
    with pytest.raises(NoGGUFFilesError, match="has no GGUF files"):
        client.details("acme/NoGGUF")


def test_missing_repository_is_a_sentence(hub: FakeHub, client: HubClient) -> None:
    with pytest.raises(HubError) as info:
        client.details("acme/does-not-exist")
    text = str(info.value)
    assert "acme/does-not-exist" in text and "Traceback" not in text and "\n" not in text


def test_remote_header_and_fit_verdicts(hub: FakeHub, client: HubClient, tiny_gguf: Path) -> None:
    _populate(hub, tiny_gguf)
    details = client.details("acme/Big-GGUF")
    entry = details.entries[0]
    info = client.remote_model_info("acme/Big-GGUF", entry, first=4096)
    ranges = [r.headers.get("Range") for r in hub.cdn_requests("big-F16-00001-of-00003.gguf")]
    assert ranges and all(r is not None and r.startswith("bytes=0-") for r in ranges)
    assert len(ranges) >= 2  # 4 KB was too short for the header: it asked for more
    assert info.architecture == "llama" and info.size_bytes == entry.size
    assert info.path == "hf://acme/Big-GGUF/F16/big-F16-00001-of-00003.gguf"

    needed = fit.estimate(entry.size, info, available=1 << 40).needed
    assert fit.estimate(entry.size, info, available=1 << 40).verdict == "fits"
    assert fit.estimate(entry.size, info, available=int(needed / 0.9)).verdict == "tight"
    assert fit.estimate(entry.size, info, available=needed - 1).verdict == "will not fit"
    est = fit.estimate(entry.size, info, available=1 << 40)
    assert est.basis == "header" and est.context > 0 and est.n_ctx > 0
    assert est.sentence.startswith("Fits:")
    # the engine's own context estimate is the context part
    from app.engine.settings import ContextSettings

    assert est.context == ContextSettings().memory_estimate(info).total
    assert fit.estimate(entry.size, None, available=1 << 40).basis == "size"


def test_recommend_largest_that_fits() -> None:
    sizes = [4 << 30, 8 << 30, 2 << 30, 16 << 30]
    entries = [GGUFEntry("Q", (RemoteFile(f"m{i}.gguf", s, None),)) for i, s in enumerate(sizes)]

    def verdict(i: int) -> fit.FitEstimate:
        return fit.estimate(entries[i].size, None, available=12 << 30)

    assert fit.recommend(sizes, verdict) == 1  # 8 GB fits in 12 GB; 16 GB does not
    assert fit.recommend(sizes, lambda i: fit.estimate(sizes[i], None, available=1)) is None


def test_hub_package_does_not_import_llama_cpp() -> None:
    import subprocess

    code = (
        "import sys, app.hub, app.hub.download, app.hub.catalog; print('llama_cpp' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_available_memory_is_positive() -> None:
    assert fit.available_memory() > 0
