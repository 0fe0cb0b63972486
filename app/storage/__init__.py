"""Everything a user would hate to lose: Qt-free, on the standard library's ``sqlite3``.

Files (all under ``app.paths.data_dir()``, which ``LLAMADESK_HOME`` overrides):
``llamadesk.sqlite3`` (WAL mode, ``synchronous=FULL``, foreign keys on, schema version in
``PRAGMA user_version``), ``states/*.kvstate`` (KV state files) and ``settings.json``.

Threads
    A connection serves the thread that opened it: the rule and the two ways to follow it
    (``Database.open``/``clone`` for a job, :class:`PerThread` for a serving thread) are
    in :mod:`app.storage.threads`.

Opening
    ``db = Database.open()`` (default path ``paths.database_path()``). Problems raise a
    :class:`DatabaseOpenError` subclass whose ``str()`` is the sentence to show and whose
    ``ways_out`` says what to offer: ``"read_only"`` -> ``Database.open(read_only=True)``
    (every write then raises :class:`ReadOnlyModeError`), ``"move_aside"`` ->
    ``move_aside(exc.path)`` then ``Database.open()`` again (empty). Subclasses:
    :class:`DatabaseCorruptError`, :class:`DatabaseTooNewError`,
    :class:`DatabaseReadOnlyError`. Errors later on (disk full, damaged page found, busy)
    are :class:`StorageError` subclasses too; anything else escaping is a bug.
    ``Database.open(check=True)`` also runs ``PRAGMA quick_check`` (~0.3 s at 100,000
    messages); without it, damage shows up as :class:`DatabaseCorruptError` from the call
    that reads the damaged page.

Conversations (times are float unix seconds everywhere)
    ``create_conversation(title=None, *, system_prompt="", sampling=None, model_path=None)``,
    ``get_conversation(id)``, ``list_conversations(include_archived=False)`` (pinned first,
    then most recently updated), ``rename(id, title)``, ``set_pinned``, ``set_archived``,
    ``update_conversation_settings(id, *, system_prompt=, sampling=, model_path=)``,
    ``delete_conversation(id)`` (soft; ``restore_conversation(id)`` is the Undo;
    ``purge_deleted(older_than_seconds=0)`` removes them for good and returns their ids so
    their state files can be deleted), ``fork_conversation(id, up_to_message_id)``.

Messages (a tree: editing = a sibling, regenerating = a sibling reply)
    ``add_message(cid, role, content, parent_id=None, status="complete", ...)`` commits
    before returning (show the message as sent afterwards); it becomes the current leaf and
    the first user message titles the conversation. Streaming: ``m = begin_reply(cid,
    parent_id, model_path=...)`` (status "partial") -> ``update_reply(m.id, text_so_far,
    reasoning=thinking_so_far, reasoning_ms=...)`` every ~0.3 s (one fsync'ed commit, ~4 ms:
    call it from the worker) -> ``finish_reply(m.id, text, "complete" | "stopped" |
    "error", token_count=, prompt_tokens=, tokens_per_second=, reasoning=,
    reasoning_ms=)``; a reasoning model's thinking (``Message.reasoning``, with its duration
    ``reasoning_ms``, None when unknown) is kept apart from the answer (``content``); the
    ``reasoning*`` arguments left out (None) keep the stored value, and search looks at
    ``content`` only. A "partial" message found while
    nothing is generating was interrupted (crash). Navigation: ``get_thread(cid,
    leaf_id=None)``, ``children(mid)``, ``siblings(mid)``, ``sibling_position(mid) ->
    (i, n)``, ``leaf_of(mid)``, ``set_current_leaf(cid, mid)``, ``delete_branch(mid)``,
    ``delete_message(mid)`` (one message; its replies move up to its parent).

Tabs, search, models
    ``save_tabs(tabs, active_conversation_id)`` / ``load_tabs() -> (tabs, active_id)``.
    ``search(text, limit=50, *, marks=("[", "]"))`` -> :class:`SearchHit` list (FTS5,
    bm25-ranked, any input is safe; every word must occur, the last one may be a prefix;
    when more than 10,000 messages match, only the most recent 10,000 are ranked). ``add_folder``, ``remove_folder``, ``list_folders``,
    ``scan(read_metadata)`` -> :class:`ScanResult`, ``add_model_file(path,
    read_metadata)``, ``list_models()``, ``get_model``, ``mark_used``, ``save_preset``,
    ``get_presets``, ``delete_preset``.

Also here: :class:`StateStore` (KV state files), :mod:`app.storage.settings`
(``AppSettings``, ``load_settings``, ``save_settings``) and :mod:`app.storage.export`
(``export_json``, ``export_markdown``, ``import_json``).
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from app.storage._core import move_aside
    from app.storage.conversations import UNSET, fts_query, make_title
    from app.storage.database import Database
    from app.storage.errors import (
        DatabaseBusyError,
        DatabaseCorruptError,
        DatabaseOpenError,
        DatabaseReadOnlyError,
        DatabaseTooNewError,
        DiskError,
        ImportValidationError,
        NotFoundError,
        ReadOnlyModeError,
        StorageError,
    )
    from app.storage.export import export_json, export_markdown, import_json
    from app.storage.library import MetadataReader
    from app.storage.models import (
        DEFAULT_TITLE,
        Conversation,
        Message,
        ModelEntry,
        Preset,
        Role,
        ScanResult,
        SearchHit,
        Status,
        Tab,
    )
    from app.storage.schema import SCHEMA_VERSION
    from app.storage.settings import AppSettings, SamplingDefaults, load_settings, save_settings
    from app.storage.state import StateStore
    from app.storage.threads import PerThread

# Imported on first use (PEP 562): a client that keeps no database (``llamadesk run``, the
# session without storage) never pays for SQLite, the FTS helpers and the exporters.
_HOME: dict[str, str] = {
    "AppSettings": "app.storage.settings",
    "Conversation": "app.storage.models",
    "DEFAULT_TITLE": "app.storage.models",
    "Database": "app.storage.database",
    "DatabaseBusyError": "app.storage.errors",
    "DatabaseCorruptError": "app.storage.errors",
    "DatabaseOpenError": "app.storage.errors",
    "DatabaseReadOnlyError": "app.storage.errors",
    "DatabaseTooNewError": "app.storage.errors",
    "DiskError": "app.storage.errors",
    "ImportValidationError": "app.storage.errors",
    "Message": "app.storage.models",
    "MetadataReader": "app.storage.library",
    "ModelEntry": "app.storage.models",
    "NotFoundError": "app.storage.errors",
    "PerThread": "app.storage.threads",
    "Preset": "app.storage.models",
    "ReadOnlyModeError": "app.storage.errors",
    "Role": "app.storage.models",
    "SCHEMA_VERSION": "app.storage.schema",
    "SamplingDefaults": "app.storage.settings",
    "ScanResult": "app.storage.models",
    "SearchHit": "app.storage.models",
    "StateStore": "app.storage.state",
    "Status": "app.storage.models",
    "StorageError": "app.storage.errors",
    "Tab": "app.storage.models",
    "UNSET": "app.storage.conversations",
    "export_json": "app.storage.export",
    "export_markdown": "app.storage.export",
    "fts_query": "app.storage.conversations",
    "import_json": "app.storage.export",
    "load_settings": "app.storage.settings",
    "make_title": "app.storage.conversations",
    "move_aside": "app.storage._core",
    "save_settings": "app.storage.settings",
}

__all__ = [
    "DEFAULT_TITLE",
    "SCHEMA_VERSION",
    "UNSET",
    "AppSettings",
    "Conversation",
    "Database",
    "DatabaseBusyError",
    "DatabaseCorruptError",
    "DatabaseOpenError",
    "DatabaseReadOnlyError",
    "DatabaseTooNewError",
    "DiskError",
    "ImportValidationError",
    "Message",
    "MetadataReader",
    "ModelEntry",
    "NotFoundError",
    "PerThread",
    "Preset",
    "ReadOnlyModeError",
    "Role",
    "SamplingDefaults",
    "ScanResult",
    "SearchHit",
    "StateStore",
    "Status",
    "StorageError",
    "Tab",
    "export_json",
    "export_markdown",
    "fts_query",
    "import_json",
    "load_settings",
    "make_title",
    "move_aside",
    "save_settings",
]


def __getattr__(name: str) -> Any:
    module = _HOME.get(name)
    if module is None:
        raise AttributeError(f"module 'app.storage' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
