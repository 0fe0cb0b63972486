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


# -- no import circle, no big module ----------------------------------------------------------

MAX_MODULE_LINES = 650


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(APP.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _app_modules() -> dict[str, Path]:
    return {_module_name(path): path for path in sorted(APP.rglob("*.py"))}


def _import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """module -> the app modules it imports: every import statement counts, at the top, in
    a function or under ``TYPE_CHECKING`` (a name imported from a package is the submodule
    of that name when there is one, else the package)."""

    def known(name: str) -> str | None:
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import):
                targets.update(t for alias in node.names if (t := known(alias.name)))
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, *([node.module] if node.module else [])])
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    target = full if full in modules else known(base)
                    if target:
                        targets.add(target)
        targets.discard(module)
        graph[module] = targets
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One import circle per strongly connected group of modules (Tarjan), as a path."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                group.add(w)
                if w == v:
                    break
            if len(group) > 1:
                groups.append(group)

    for module in sorted(graph):
        if module not in index:
            visit(module)

    def circle(group: set[str]) -> list[str]:
        # the shortest way back to the group's first module (breadth first, in the group)
        start = min(group)
        came_from: dict[str, str] = {}
        frontier = [start]
        while frontier:
            nxt: list[str] = []
            for v in frontier:
                for w in sorted(graph[v] & group):
                    if w == start:
                        path = [v]
                        while path[-1] != start:
                            path.append(came_from[path[-1]])
                        return [start, *reversed(path[:-1]), start]
                    if w not in came_from:
                        came_from[w] = v
                        nxt.append(w)
            frontier = nxt
        raise AssertionError(f"no circle in {sorted(group)}")

    return [circle(group) for group in groups]


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _cycles(graph) == [["a", "b", "c", "a"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_relative_and_nested_imports_count(tmp_path: Path) -> None:
    modules = {"app.p": tmp_path / "__init__.py", "app.p.x": tmp_path / "x.py"}
    modules["app.p"].write_text("")
    modules["app.p.x"].write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from . import y\n"
        "def f():\n    from app.p.z import g\n"
    )
    modules["app.p.y"] = tmp_path / "y.py"
    modules["app.p.y"].write_text("import app.p.x\n")
    modules["app.p.z"] = tmp_path / "z.py"
    modules["app.p.z"].write_text("")
    graph = _import_graph(modules)
    assert graph["app.p.x"] == {"app.p.y", "app.p.z"}
    assert _cycles(graph) == [["app.p.x", "app.p.y", "app.p.x"]]


def test_no_import_circle() -> None:
    circles = _cycles(_import_graph(_app_modules()))
    assert not circles, "import circles:\n" + "\n".join(" -> ".join(c) for c in circles)


def test_no_big_module() -> None:
    big = {
        str(path.relative_to(APP.parent)): n
        for path in sorted(APP.rglob("*.py"))
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not big, f"modules over {MAX_MODULE_LINES} lines (split them into rooms): {big}"


# -- one writer of messages ---------------------------------------------------------------

# The calls that write a conversation's messages: storage's own, and the session recorder's.
MESSAGE_WRITES = frozenset(
    {
        "add_message",
        "begin_reply",
        "update_reply",
        "finish_reply",
        "record_exchange",
        "end_reply",
        "delete_message",
        "delete_branch",
    }
)
# Where they may be called: storage (which defines them) and the session (whose recorder is
# the one writer of every client's messages).
WRITERS = ("app/storage", "app/session")
# Known exceptions, each with its reason. The API server's store runs the session's own
# Recorder on its storage thread (the recorder writes, in the shape a window's reply gets;
# the server's session has no database of its own yet): remove it when that session records.
ALLOWED_WRITES = {("app/server/store.py", "record_exchange")}


def _message_writes(path: Path) -> list[tuple[int, str]]:
    """The message-writing calls in ``path``: (line, method name)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return [
        (node.lineno, node.func.attr)
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MESSAGE_WRITES
    ]


def test_the_write_finder_finds_calls(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f(db, r):\n    db.add_message(1, 'user', 'x')\n    r.record_exchange(1)\n"
        "    db.get_message(1)\n"
    )
    assert _message_writes(source) == [(2, "add_message"), (3, "record_exchange")]


def test_messages_are_written_by_the_session_recorder_only() -> None:
    """Issue 19 item 1: the window, the server and the engine send commands and show
    events; they never write a message themselves."""
    wrong = [
        f"{rel}:{line} calls {name}"
        for path in sorted(APP.rglob("*.py"))
        if not (rel := str(path.relative_to(APP.parent))).startswith(WRITERS)
        for line, name in _message_writes(path)
        if (rel, name) not in ALLOWED_WRITES
    ]
    assert not wrong, "\n".join(wrong)


# -- one door to conversation rows ---------------------------------------------------------

# The storage calls that change a conversation's row or its place in the window (issue 28
# item 1): called on a storage connection, they belong to storage and the session (its
# library, app/session/library.py); the window asks the session.
CONVERSATION_WRITES = frozenset(
    {
        "create_conversation",
        "fork_conversation",
        "rename",
        "set_pinned",
        "delete_conversation",
        "restore_conversation",
        "purge_deleted",
        "update_conversation_settings",
        "set_current_leaf",
        "save_tabs",
        "import_json",
    }
)
# Known exceptions, each with its reason. The API server's store and `llamadesk remote`
# create their conversations on connections of their own (no window involved).
ALLOWED_CONVERSATION_WRITES = {
    ("app/server/store.py", "create_conversation"),
    ("app/remote_cli.py", "create_conversation"),
}


def _receiver(node: ast.expr) -> str:
    """The name a call is made on: ``db`` for ``db.x()``, ``self.db.x()``, ``win.db.x()``."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _conversation_writes(path: Path) -> list[tuple[int, str]]:
    """Calls of :data:`CONVERSATION_WRITES` on a storage connection (a receiver named
    ``db``, ``_db`` or ``database``) or as plain functions (``import_json(db, ...)``)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in CONVERSATION_WRITES:
            if _receiver(func.value).lstrip("_") in {"db", "database"}:
                found.append((node.lineno, func.attr))
        elif isinstance(func, ast.Name) and func.id in CONVERSATION_WRITES:
            found.append((node.lineno, func.id))
    return found


def test_the_conversation_write_finder_finds_calls(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text(
        "def f(db, win, door):\n    win.db.rename(1, 'x')\n    door.rename(1, 'x')\n"
        "    import_json(db, {})\n    db.get_conversation(1)\n    self._db.save_tabs([], None)\n"
    )
    assert _conversation_writes(source) == [(2, "rename"), (4, "import_json"), (6, "save_tabs")]


def test_conversations_are_changed_through_the_session_only() -> None:
    """Issue 28 item 1: the window changes conversations through the session's library;
    no conversation row is written elsewhere."""
    wrong = [
        f"{rel}:{line} calls {name}"
        for path in sorted(APP.rglob("*.py"))
        if not (rel := str(path.relative_to(APP.parent))).startswith(WRITERS)
        for line, name in _conversation_writes(path)
        if (rel, name) not in ALLOWED_CONVERSATION_WRITES
    ]
    assert not wrong, "\n".join(wrong)


# -- the window's Database, shrinking ------------------------------------------------------

# app/ui modules that still name storage's Database (issue 28 item 1 wants none): each with
# why. A module not listed here may not import it; remove a line when its module stops.
DATABASE_HOLDERS = {
    "app/ui/main.py": "opens the database (its recovery dialogs) and hands it to the window",
    "app/ui/main_window.py": "hands it to the session and to the model library",
    "app/ui/worker.py": "passes it to the session",
    "app/ui/window_protocols.py": "the model and settings windows' model library",
    "app/ui/engines_models.py": "the model library (remote models)",
    "app/ui/model_library_view.py": "the model library",
    "app/ui/model_manager.py": "the model library",
    "app/ui/model_picker.py": "the model library",
    "app/ui/model_scan.py": "the model library's scans (a pool thread's connection)",
    "app/ui/sidebar.py": "its path for the search and the exports (pool threads)",
    "app/ui/sidebar_search.py": "the search's own connection (a pool thread)",
    "app/ui/export_import.py": "exports read on a pool thread's own connection",
}


def _names_database(path: Path) -> bool:
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    return any(
        isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith("app.storage")
        and any(alias.name == "Database" for alias in node.names)
        for node in ast.walk(tree)
    )


def test_only_the_listed_window_modules_hold_a_database() -> None:
    holders = {
        str(path.relative_to(APP.parent))
        for path in sorted((APP / "ui").rglob("*.py"))
        if _names_database(path)
    }
    assert holders <= set(DATABASE_HOLDERS), sorted(holders - set(DATABASE_HOLDERS))
    # the chat (its tab, turns, messages, deletes) reaches conversations through the session
    for chat in ("chat_tab", "tab_turn", "chat_messages", "message_delete", "tab_host"):
        assert f"app/ui/{chat}.py" not in holders
