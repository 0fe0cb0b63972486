"""Qt-free inference on llama.cpp: one model, one context, many sequences.

:class:`Engine` (:mod:`app.engine.engine`) is the facade; its module docstring maps the
rooms behind it. ``../shared/DESIGN.md`` says why it is built on llama.cpp's C functions
rather than llama-cpp-python's ``Llama`` class.
"""

from typing import TYPE_CHECKING, Any

from app.engine.chat_template import ChatTemplate, ChatTemplateError
from app.engine.errors import (
    ContextError,
    ContextFullError,
    EngineError,
    ModelLoadError,
    StateError,
)
from app.engine.events import (
    Completion,
    ContextShifted,
    Event,
    Evicted,
    Finished,
    PromptProgress,
    RestoreOutcome,
    SequenceFailed,
    StateRestored,
    TokenText,
    ToolCallArguments,
    ToolCallStarted,
)
from app.engine.metadata import ModelInfo, fingerprint, read_model_info
from app.engine.settings import ContextSettings, ModelSettings, SamplingParams
from app.engine.state_file import SequenceState
from app.engine.threads import configure_openmp

# Before anything loads llama.cpp (none of the imports above does; libgomp reads its spin
# setting once, when it loads): worker threads that spin at every barrier collapse when
# another process needs a core (app.engine.threads).
configure_openmp()

if TYPE_CHECKING:
    from app.engine.engine import Engine
    from app.engine.sequence import Phase, SequenceInfo

# These load llama.cpp (its shared libraries): reading metadata, settings or estimates (the
# model manager, the hub's fit verdict, storage) does not need it, so they load on first use.
_LAZY = {
    "Engine": "app.engine.engine",
    "Phase": "app.engine.sequence",
    "SequenceInfo": "app.engine.sequence",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'app.engine' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)


__all__ = [
    "ChatTemplate",
    "ChatTemplateError",
    "Completion",
    "ContextError",
    "ContextFullError",
    "ContextSettings",
    "ContextShifted",
    "Engine",
    "EngineError",
    "Event",
    "Evicted",
    "Finished",
    "ModelInfo",
    "ModelLoadError",
    "ModelSettings",
    "Phase",
    "PromptProgress",
    "RestoreOutcome",
    "SamplingParams",
    "SequenceFailed",
    "SequenceInfo",
    "SequenceState",
    "StateError",
    "StateRestored",
    "TokenText",
    "ToolCallArguments",
    "ToolCallStarted",
    "fingerprint",
    "read_model_info",
]
