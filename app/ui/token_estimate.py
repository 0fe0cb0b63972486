"""About how many tokens a chat has, without the model: for the context meter while none
of the chat is in the cache yet (an imported chat, a chat after a model switch).

Cheap enough for the GUI thread (no tokenizer call): the stored figures of the last reply
that has them, and the text after it at :data:`CHARS_PER_TOKEN`. The meter says it is an
estimate; the session's count replaces it once the chat is read.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from app.storage import Message

CHARS_PER_TOKEN = 4  # the usual average of English text in BPE vocabularies


def chat_token_estimate(messages: Sequence[Message]) -> int:
    """About how many tokens ``messages`` (a branch, oldest first) make in a prompt."""
    rest: Sequence[Message] = messages
    total = 0
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        if m.role == "assistant" and m.prompt_tokens and m.token_count:
            total, rest = m.prompt_tokens + m.token_count, messages[i + 1 :]
            break
    return total + sum(math.ceil(len(m.content) / CHARS_PER_TOKEN) for m in rest)
