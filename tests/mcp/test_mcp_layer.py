"""app/mcp is Qt-free and does not touch llama.cpp: the CLI, the server and the window
can all use it."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

APP = Path(__file__).resolve().parents[2] / "app"
FORBIDDEN = ("PySide6", "llama_cpp", "app.ui", "app.engine")


@pytest.mark.parametrize(
    "path", [*sorted((APP / "mcp").glob("*.py")), APP / "mcp_cli.py"], ids=lambda p: p.name
)
def test_no_forbidden_imports(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module]
        for name in names:
            assert not any(name == f or name.startswith(f + ".") for f in FORBIDDEN), (
                f"{path.name} imports {name}"
            )
