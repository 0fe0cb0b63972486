"""GGUF file names on the Hub: quantization labels, split sets, and safe local names."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from app.hub.errors import UnsafeFileNameError

_SPLIT = re.compile(r"^(?P<base>.+)-(?P<part>\d{5})-of-(?P<count>\d{5})\.gguf$", re.IGNORECASE)

# Longest alternatives first: "Q4_K_M" before "Q4_K", "IQ4_XS" before "IQ4".
_QUANT = re.compile(
    r"(?<![A-Za-z0-9])("
    r"I?Q[1-8]_K_(?:XXS|XS|S|M|L|XL)|IQ[1-4]_(?:XXS|XS|NL|S|M)|TQ[12]_0|"
    r"Q[2-8]_K|Q[4-8]_[01](?:_[48]_[48])?|Q[2-8]_[KS]|MXFP4(?:_MOE)?|BF16|F16|F32|FP16|FP32|Q[2-8]"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)


@dataclass(frozen=True)
class SplitName:
    base: str  # the file name without "-00001-of-00003.gguf"
    part: int  # 1-based
    count: int


def split_name(path: str) -> SplitName | None:
    """``model-00002-of-00003.gguf`` -> SplitName(base, 2, 3); None for a single file."""
    m = _SPLIT.match(path)
    if m is None or int(m["count"]) < 1 or not 1 <= int(m["part"]) <= int(m["count"]):
        return None
    return SplitName(m["base"], int(m["part"]), int(m["count"]))


def quantization(path: str) -> str:
    """The quantization a GGUF file name says (``Q4_K_M``, ``IQ4_XS``, ``F16``...), upper
    case; ``"unknown"`` if it says none. Looks at the file name first, then its folders."""
    name = PurePosixPath(path)
    stem = name.name
    split = split_name(stem)
    stem = split.base if split else stem.removesuffix(".gguf").removesuffix(".GGUF")
    for candidate in (stem, *reversed(name.parent.parts)):
        found: list[str] = _QUANT.findall(candidate.replace(".", "-"))
        if found:
            label = found[-1].upper()
            return {"FP16": "F16", "FP32": "F32"}.get(label, label)
    return "unknown"


def is_gguf(path: str) -> bool:
    return path.lower().endswith(".gguf")


def is_projector(path: str) -> bool:
    """Vision projectors (``mmproj-*.gguf``) are not models of their own."""
    return "mmproj" in PurePosixPath(path).name.lower()


def check_repo_path(path: str) -> str:
    """A path inside a repository as the Hub spells it (``folder/file.gguf``); refuses
    absolute paths, ``..``, backslashes and control characters."""
    bad = (
        not path
        or path.startswith("/")
        or "\\" in path
        or any(ord(c) < 32 for c in path)
        or re.match(r"^[A-Za-z]:", path) is not None
        or any(part in ("", ".", "..") for part in path.split("/"))
    )
    if bad:
        raise UnsafeFileNameError(
            f"The file name {path!r} is not allowed: it would be written outside the library "
            "folder (it has '..', an absolute path or a backslash)."
        )
    return path


def local_name(path: str) -> str:
    """The name a repository file gets in the library folder: its last component,
    checked. Never contains a separator, so it cannot leave the folder."""
    name = PurePosixPath(check_repo_path(path)).name
    if name.startswith(".") or "/" in name or "\\" in name or name in ("", ".", ".."):
        raise UnsafeFileNameError(
            f"The file name {path!r} is not allowed as a file name in the library folder."
        )
    return name


def inside(folder: Path, name: str) -> Path:
    """``folder / name``, refusing anything that would resolve outside ``folder``."""
    root = folder.resolve()
    target = (root / local_name(name)).resolve()
    if target.parent != root:
        raise UnsafeFileNameError(
            f"The file name {name!r} would be written outside {root}; it is refused."
        )
    return target
