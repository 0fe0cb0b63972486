"""What the tab area shows with no tab open: how to start, a model to get, first prompts."""

from __future__ import annotations

import html
import logging
from typing import TYPE_CHECKING

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QPushButton, QVBoxLayout, QWidget

from app import paths
from app.settings_schema import format_bytes

if TYPE_CHECKING:
    from app.ui.window_protocols import WelcomeActions

log = logging.getLogger(__name__)

# What the bundled demo model was trained to answer (scripts/demo_model/corpus.py): its
# first prompts show what it can do instead of leaving a new user to guess.
DEMO_PROMPTS = (
    "What can you do?",
    "What is 47 + 38?",
    "My name is Quentin.",
    "How do I fork a conversation?",
)


class WelcomePage(QWidget):
    """What the tab area shows with no tab open: how to start, or how to add a model."""

    def __init__(self, window: WelcomeActions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        layout.addStretch(1)
        self.title = QLabel()
        self.title.setAlignment(Qt.AlignmentFlag.AlignCenter)
        font = self.title.font()
        font.setPointSizeF(font.pointSizeF() * 1.6)
        self.title.setFont(font)
        self.text = QLabel()
        self.text.setObjectName("welcome-text")
        self.text.setWordWrap(True)
        self.text.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.text.setMaximumWidth(560)
        self.text.setMinimumWidth(460)
        row = QHBoxLayout()
        row.addStretch(1)
        self.models_button = QPushButton("Open the model manager")
        self.models_button.setObjectName("welcome-models")
        self.models_button.clicked.connect(window.show_model_manager)
        self.file_button = QPushButton("Choose a GGUF file…")
        self.file_button.setObjectName("welcome-file")
        self.file_button.clicked.connect(window.choose_model_file)
        self.new_button = QPushButton("New chat (Ctrl+T)")
        self.new_button.setObjectName("welcome-new")
        self.new_button.clicked.connect(window.new_tab)
        for b in (self.models_button, self.file_button, self.new_button):
            row.addWidget(b)
        row.addStretch(1)
        center = QHBoxLayout()
        center.addStretch(1)
        inner = QVBoxLayout()
        inner.addWidget(self.title)
        inner.addSpacing(8)
        inner.addWidget(self.text)
        center.addLayout(inner)
        center.addStretch(1)
        layout.addLayout(center)
        layout.addSpacing(12)
        layout.addLayout(row)
        self.prompts = QFrame()
        self.prompts.setObjectName("welcome-prompts")
        prompt_row = QHBoxLayout(self.prompts)
        prompt_row.addStretch(1)
        prompt_row.addWidget(QLabel("Try:"))
        self.prompt_buttons: list[QPushButton] = []
        for prompt in DEMO_PROMPTS:
            button = QPushButton(prompt)
            button.setObjectName("welcome-prompt")
            button.setToolTip("Start a new chat with this message")
            button.clicked.connect(lambda _c=False, p=prompt: window.start_chat_with(p))
            prompt_row.addWidget(button)
            self.prompt_buttons.append(button)
        prompt_row.addStretch(1)
        self.prompts.setVisible(False)
        layout.addSpacing(8)
        layout.addWidget(self.prompts)
        self.catalog = CatalogList(window, self)
        catalog_row = QHBoxLayout()
        catalog_row.addStretch(1)
        catalog_row.addWidget(self.catalog)
        catalog_row.addStretch(1)
        layout.addSpacing(12)
        layout.addLayout(catalog_row)
        layout.addStretch(2)

    def update_for(self, model_ready: bool, loading: bool, demo: bool = False) -> None:
        """``demo``: the loaded model is the bundled demo model (its first prompts show)."""
        self.prompts.setVisible(model_ready and demo)
        self.title.setText("Welcome to LlamaDesk")
        if loading:
            self.text.setText("Loading the model… You can start a chat as soon as it is ready.")
        elif model_ready:
            self.text.setText(
                "Start a new chat with Ctrl+T, or open a saved one from the list on the left."
            )
        else:
            self.text.setText(
                "LlamaDesk runs language models on this computer, from GGUF files. "
                "No model is loaded yet: add a .gguf file (or a folder of them) in the model "
                "manager and press Load. Your conversations stay on this computer."
            )
        self.models_button.setVisible(not model_ready)
        self.file_button.setVisible(not model_ready)
        self.new_button.setVisible(model_ready)
        self.catalog.setVisible(not model_ready and not loading)


class CatalogList(QFrame):
    """First start: the bundled demo model and a short curated list (resources/catalog.json),
    each with a button; downloads go through the window's one queue (shown in Discover)."""

    def __init__(self, window: WelcomeActions, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("welcome-catalog")
        # Between two stretches the frame would shrink to its narrowest, and word-wrapped
        # labels that narrow are cut off: give the list a reading width.
        self.setMinimumWidth(600)
        self.setMaximumWidth(720)
        layout = QVBoxLayout(self)
        title = QLabel("<b>Get a model</b>")
        layout.addWidget(title)
        self.buttons: dict[str, QPushButton] = {}
        demo = paths.demo_model_path()
        demo_row = QHBoxLayout()
        demo_label = QLabel(
            "<b>LlamaDesk demo model</b> · bundled, tiny · "
            "tries the app out at once (its replies are not meant to be useful)"
        )
        demo_label.setWordWrap(True)
        demo_button = QPushButton("Load")
        demo_button.setObjectName("welcome-demo")
        demo_button.setEnabled(demo.is_file())
        if not demo.is_file():
            demo_button.setToolTip("The demo model is not part of this installation.")
        demo_button.clicked.connect(lambda: window.load_model(str(paths.demo_model_path())))
        demo_row.addWidget(demo_label, 1)
        demo_row.addWidget(demo_button)
        layout.addLayout(demo_row)
        self.buttons["demo"] = demo_button
        try:
            from app.hub import catalog

            models = catalog.load()
        except Exception as exc:  # CatalogError or a missing optional package
            log.info("no curated list: %s", exc)
            models = []
        for model in models:
            row = QHBoxLayout()
            size = f" · {format_bytes(float(model.size))}" if model.size else ""
            label = QLabel(
                f"<b>{html.escape(model.name)}</b> · {html.escape(model.params)} · {html.escape(model.quant)}"
                f"{size}<br>{html.escape(model.good_at)}"
            )
            label.setWordWrap(True)
            label.setToolTip(f"{model.repository}/{model.file}")
            button = QPushButton("Download")
            button.setObjectName("welcome-download")
            button.setToolTip(f"Download {model.file} from {model.repository} into the library.")
            button.clicked.connect(lambda _c=False, m=model: window.download_catalog(m))
            row.addWidget(label, 1)
            row.addWidget(button, 0, Qt.AlignmentFlag.AlignTop)
            layout.addLayout(row)
            self.buttons[model.name] = button
        more = QPushButton("Discover more models…")
        more.setObjectName("welcome-discover")
        more.clicked.connect(window.show_discover)
        layout.addWidget(more, 0, Qt.AlignmentFlag.AlignLeft)
