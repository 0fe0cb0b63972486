"""Streaming text: whole UTF-8 characters only, and stop strings that span tokens."""

from __future__ import annotations

import codecs


class Utf8Stream:
    """Turns token pieces (bytes) into text, holding back an unfinished character.

    A token piece may end in the middle of a multi-byte character (byte-fallback and
    byte-level BPE vocabularies do this for emoji and CJK); the incomplete bytes wait for
    the next piece. Invalid bytes become U+FFFD rather than an exception.
    """

    def __init__(self) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, data: bytes) -> str:
        return self._decoder.decode(data)

    def flush(self) -> str:
        return self._decoder.decode(b"", final=True)


class StopMatcher:
    """Finds stop strings in streamed text without ever emitting part of one.

    ``feed`` returns the text that is safe to show: everything except a tail that could be
    the beginning of a stop string. When a stop string completes, ``stopped`` is set and the
    text before it is returned.
    """

    def __init__(self, stops: list[str]) -> None:
        self._stops = [s for s in stops if s]
        self._held = ""
        self.stopped: str | None = None

    def feed(self, text: str) -> str:
        if not self._stops:
            return text
        buffer = self._held + text
        cut = -1
        for stop in self._stops:
            index = buffer.find(stop)
            if index != -1 and (cut == -1 or index < cut):
                cut = index
                self.stopped = stop
        if cut != -1:
            self._held = ""
            return buffer[:cut]
        hold = 0
        for stop in self._stops:
            for length in range(min(len(stop) - 1, len(buffer)), 0, -1):
                if buffer.endswith(stop[:length]):
                    hold = max(hold, length)
                    break
        self._held = buffer[len(buffer) - hold :] if hold else ""
        return buffer[: len(buffer) - hold] if hold else buffer

    def flush(self) -> str:
        """At the end of generation a held tail was not a stop string after all."""
        held, self._held = self._held, ""
        return held
