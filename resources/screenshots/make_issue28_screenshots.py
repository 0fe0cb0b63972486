"""The README's screenshots of issue 28 item 6 (what a new user met): a long reply's code
after a switch to Dark, a base model's chat as text completion, Preferences with every
section's tab in view.

Made from the real window; under Xvfb as make_screenshots.py says, or (no X server here)
with Qt's offscreen platform, whose widget grabs render the same widgets:

    QT_QPA_PLATFORM=offscreen python resources/screenshots/make_issue28_screenshots.py

Writes PNGs next to this file. A temporary LLAMADESK_HOME keeps the user's data out; the
models are tiny ones the script writes (as the tests use).
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent))
sys.path.insert(0, str(HERE))

from make_screenshots import close, open_window, save, set_sampling, spin  # noqa: E402

REPLY = (
    "Here is the function, with `total` kept as it goes:\n\n"
    "```python\ndef tidy(desk: list[str]) -> list[str]:\n"
    "    total = 0\n    for item in sorted(desk):\n        total += len(item)\n"
    "    return sorted(desk)\n```\n\n"
    "Each pass sorts the items; `sorted` returns a new list.\n\n"
)


def main() -> int:
    home = Path(tempfile.mkdtemp(prefix="llamadesk-shots-"))
    os.environ["LLAMADESK_HOME"] = str(home)
    from PySide6.QtWidgets import QApplication  # noqa: TID251

    app = QApplication.instance() or QApplication(sys.argv)
    from app.ui.theme import apply_theme
    from tests.support.gguf_models import TinySpec, write_tiny_model

    context = {"n_ctx": 2048, "n_seq_max": 2, "n_threads": 1, "n_threads_batch": 1}
    chat = write_tiny_model(home / "tiny-chat.gguf", TinySpec())

    # 1. a long reply with code, light, then switched to Dark while running
    window, db = open_window(chat, context, theme="light")
    conv = db.create_conversation()
    user = db.add_message(conv.id, "user", "How do I keep a desk tidy, in Python?")
    db.add_message(conv.id, "assistant", REPLY * 4, parent_id=user.id)
    window.open_conversation(conv.id)
    tab = window.current_tab()
    assert tab is not None
    tab.view.scroll_to_end()
    apply_theme("dark")
    save(window, "issue28-dark-switch-code.png")
    apply_theme("light")

    # 2. Preferences: every section's tab in view
    dialog = window.open_preferences()
    spin(dialog.isVisible, 5)
    save(dialog, "issue28-preferences-tabs.png")
    dialog.close()
    close(window, db)

    # 3. a base model: one document, the continuation in place
    base = write_tiny_model(home / "tiny-base.gguf", TinySpec(name="Tiny Base", chat_template=None))
    window, db = open_window(base, context, theme="light")
    tab = window.new_tab()
    assert tab is not None and tab.document_mode
    words = 'root ::= (" the" | " llama" | " kept" | " a" | " tidy" | " desk" | ".")+'
    set_sampling(tab, grammar=words, max_tokens=24, seed=3)
    tab.composer.setPlainText("Once upon a time, in a small village by the sea,")
    tab.send()
    spin(lambda: not tab.generating and tab.last_completion is not None, 60)
    save(window, "issue28-text-completion.png")
    close(window, db)
    app.quit()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
