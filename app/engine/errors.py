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


def context_advice(n_ctx_seq: int, n_ctx_train: int) -> str:
    """What to do when a conversation does not fit ``n_ctx_seq`` tokens: a larger context
    only helps below what the model was trained for (``n_ctx_train``; 0: unknown)."""
    if n_ctx_train <= 0:
        return "raise the context size, shorten the message, or start a new chat"
    if n_ctx_seq < n_ctx_train:
        return (
            f"raise the context size (this model supports up to {n_ctx_train:,} "
            "tokens), shorten the message, or start a new chat"
        )
    return (
        "that is all this model can hold, so shorten the message (or the system prompt) "
        "or start a new chat"
    )


def context_full_message(n_tokens: int, n_ctx_seq: int, n_ctx_train: int) -> str:
    """The sentence for a conversation of ``n_tokens`` that leaves no room in ``n_ctx_seq``
    (the local engine's, and a remote one's before it sends the turn)."""
    advice = context_advice(n_ctx_seq, n_ctx_train)
    return (
        f"The conversation needs {n_tokens:,} tokens but the context holds {n_ctx_seq:,}: {advice}."
    )
