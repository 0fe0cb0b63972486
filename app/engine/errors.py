"""Engine errors: each message is a sentence a user can act on."""

from app.errors import LlamaDeskError


class EngineError(LlamaDeskError):
    """Something the engine could not do."""


class ModelLoadError(EngineError):
    """A model file that cannot be read or loaded."""


class ContextError(EngineError):
    """Context settings that are invalid or a context that cannot be created."""


class StateError(EngineError):
    """A sequence state that cannot be saved or restored."""


class ContextFullError(EngineError):
    """A sequence ran out of context and its policy says stop."""
