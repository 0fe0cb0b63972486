"""The layers stay apart: llama.cpp only under app/engine, Qt only under app/ui, storage and
the session layer free of both (so the CLI, the server and the tests run them without a GUI).

Read from the source with ``ast`` (every import, also inside functions), not by importing.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[1] / "app"

# package -> top-level modules it must not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "app": ("llama_cpp", "PySide6"),  # the app's own top-level modules
    "app/engine": ("PySide6", "app.ui", "app.storage", "app.session", "app.server"),
    "app/storage": ("llama_cpp", "PySide6", "app.engine", "app.ui", "app.session"),
    "app/session": ("llama_cpp", "PySide6", "app.ui"),
    "app/hub": ("llama_cpp", "PySide6", "app.ui"),
    "app/server": ("llama_cpp", "PySide6", "app.ui"),
    "app/ui": ("llama_cpp",),
}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _files(package: str) -> list[Path]:
    folder = APP.parent / package
    if package == "app":
        return sorted(folder.glob("*.py"))
    return sorted(folder.rglob("*.py"))


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_layer_imports(package: str) -> None:
    files = _files(package)
    assert files, f"{package} has no modules"
    wrong = [
        f"{path.relative_to(APP.parent)} imports {name}"
        for path in files
        for name in sorted(_imports(path))
        if any(name == banned or name.startswith(banned + ".") for banned in FORBIDDEN[package])
    ]
    assert not wrong, "\n".join(wrong)
