"""The scheduler: continuous batching over every busy sequence, one decode per step.

Each step builds one ``llama_batch``: one sampled token for every generating sequence, then
prompt chunks of prefilling ones up to ``n_batch`` (at most
:data:`PROMPT_TOKENS_WHILE_GENERATING` while any sequence generates; both lists rotated, so
nobody waits behind the others step after step), with logits only on the last token of a
span. Then one ``llama_decode``, and per sequence: bookkeeping, checkpoints, sampling and text. A failed
decode is resynchronised from ``seq_pos_max``; "no memory slot" evicts an idle sequence,
halves the prompt part, or shifts the largest sequence, and tries again.

A generating sequence with speculation on (:mod:`app.engine.speculative`) adds its guesses
after its sampled token, with a logits row for each; after the decode its sampler keeps the
longest prefix it agrees with and the cache is cut back past the rest.

Where one batch measured slower than the tabs' tokens one by one (:mod:`app.engine.batching`,
once per context), a step takes one generating tab's token, the tabs in rotation.
"""

from __future__ import annotations

import logging
import time

from app.engine.batching import BatchingChoice, BatchMode
from app.engine.context_policy import ContextFullPolicy
from app.engine.context_shift import ContextShift
from app.engine.events import Completion, Event, Finished, PromptProgress, SequenceFailed
from app.engine.handles import Handles
from app.engine.output import ReplyStream
from app.engine.residency import Residency
from app.engine.sampling import Sampler
from app.engine.sequence import Phase, ReadyLogits, Sequence
from app.engine.settings import SamplingParams
from app.engine.snapshots import Snapshots
from app.engine.speculative import SpecMode, SpecSettings, SpecState, supported

log = logging.getLogger(__name__)

# One sequence's part of a batch: the sequence, its tokens, and the batch index of the
# last one when its logits are kept. A plain tuple: one is built per sequence per step.
Span = tuple[Sequence, list[int], int | None]

_MAX_ATTEMPTS = 12  # decodes per step while the cache has no room for the batch
# While any sequence generates, the prompt part of a step is capped: a step costs about the
# time of its tokens, and a generating tab gets one token per step, so a whole batch of
# another tab's prompt stalls it (512 tokens: about 4 s on the 1.1B benchmark model, one
# thread). With 64, a 1,024-token prompt read beside a generating tab took 9.5 s instead of
# 8.7 s, and the generating tab got 16 tokens meanwhile instead of 3 (longest wait 0.8 s
# instead of 4.7 s); reading a prompt 64 tokens a step is as fast as 512 at a time there
# (135 and 125 tokens/s, one thread).
PROMPT_TOKENS_WHILE_GENERATING = 64
_CONTEXT_FULL = (
    "The context is full: the cache has no room left. Close some tabs or raise the context size."
)


class Scheduler:
    def __init__(
        self,
        handles: Handles,
        snapshots: Snapshots,
        residency: Residency,
        shifter: ContextShift,
    ) -> None:
        self._h = handles
        self._snapshots = snapshots
        self._residency = residency
        self._shifter = shifter
        self._rotation = 0
        #: One batched decode or tabs in turn (app.engine.batching; set per context).
        self.batching = BatchingChoice(BatchMode.BATCHED, "Not measured yet.")
        self._drafts: dict[int, list[int]] = {}  # this step's guesses by sequence key

    # ------------------------------------------------------------ taking work

    def begin_generation(self, seq: Sequence, params: SamplingParams) -> None:
        """IDLE -> PREFILLING_TO_GENERATE: a sampler for this turn, the queued prompt first."""
        model = self._h.need_model()
        n_ctx_seq = self._h.n_ctx_seq
        if seq.sampler:
            seq.sampler.close()
        tools = seq.tool_turn if seq.messages is not None else None
        grammar = tools.grammar if tools is not None else None
        seq.sampler = Sampler(model.vocab, model.n_vocab, params, n_ctx_seq, grammar)
        if params.repeat_penalty != 1.0 or params.frequency_penalty or params.presence_penalty:
            if not params.grammar and grammar is None:  # the grammar must not see the prompt
                last_n = n_ctx_seq if params.repeat_last_n < 0 else params.repeat_last_n
                # The prompt but its last token, whether that token is queued or a
                # checkpoint's logits stand for it (a regenerate must see what the first
                # reply saw).
                before = (seq.tokens + seq.pending)[:-1]
                history = before[-last_n:] if last_n else []
                for token in history:
                    seq.sampler.accept(token)
        seq.params = params
        seq.completion = Completion(
            n_prompt=len(seq.tokens) + len(seq.pending), n_prompt_processed=len(seq.pending)
        )
        stops = list(params.stop)
        if seq.messages is not None and (grammar is None or grammar.lazy):
            # A chat turn also ends at the template's end-of-turn text where the model
            # has no token for it (a template chosen for it, or by the user). Not under a
            # forced call's grammar: it ends the reply itself, and the marker may be part
            # of the call's syntax (Kimi K3's <|close|>).
            stops += [s for s in self._h.end_markers.strings if s not in stops]
        seq.reply = ReplyStream(
            seq.key, seq.completion, stops, seq.reasoning_format, seq.opens_reasoning, tools
        )
        spec = SpecSettings.of(params.speculative, params.draft_max)
        on = spec.mode is not SpecMode.OFF and supported(self._h.traits)
        seq.spec = SpecState(spec) if on else None
        seq.begin_generation()
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        self._h.table.touch(seq)

    def begin_prefill(self, seq: Sequence, keep_logits: bool) -> None:
        """IDLE -> PREFILLING(_FOR_LOGITS): process the queue without generating."""
        seq.begin_prefill(keep_logits)
        seq.last_logits = None
        seq.prompt_total, seq.prompt_done = len(seq.pending), 0
        self._h.table.touch(seq)

    # ------------------------------------------------------------ one step

    def step(self) -> list[Event]:
        """One batched decode over every busy sequence. Returns what happened."""
        h = self._h
        events, h.side_events = h.side_events, []
        ctx = h.need_ctx()
        ctx.abort_requested = False
        seqs = h.table.by_key.values()
        for seq in seqs:
            if seq.stop_requested and seq.phase is not Phase.IDLE:
                self.finish(seq, "aborted", events)
        busy = [s for s in seqs if s.phase is not Phase.IDLE]
        if not busy:
            return events
        if h.need_model().has_encoder:
            turn = self._encoder_turn(busy, events)
            if turn is None:
                return events
            busy = [turn]
        for seq in sorted(busy, key=lambda s: s.seq_id is None):
            self._residency.ensure_resident(seq, events, protect={s.key for s in busy})
        for seq in busy:
            if seq.phase is Phase.PREFILLING_TO_GENERATE and seq.seq_id is not None:
                ready = seq.ready_logits()
                if ready is not None:
                    # A checkpoint kept the prompt's last logits: the reply starts without a decode.
                    assert seq.sampler is not None
                    now = time.perf_counter()
                    seq.first_token(now)
                    self._on_token(seq, seq.sampler.sample_logits(ready), events, now)
        prompt_cap: int | None = None  # shrinks when the cache has no room for the batch
        for _attempt in range(_MAX_ATTEMPTS):
            spans = self._build_batch(events, prompt_cap)
            if not spans:
                return events
            has_prompt = any(seq.phase is not Phase.GENERATING for seq, _, _ in spans)
            ctx.set_abort_check(has_prompt)
            ctx.use_prompt_threads(has_prompt)  # tabs' tokens alone: the generation threads
            started = time.perf_counter()
            result = ctx.decode()
            elapsed_ms = (time.perf_counter() - started) * 1000.0
            if result.ok:
                self._after_decode(spans, elapsed_ms, events)
                return events
            self._resync(spans)
            if result.aborted:
                log.info("decode aborted (stop requested)")
                return events
            if result.code < 0:
                message = f"llama.cpp failed to process the batch (error {result.code}). The reply was stopped; try again."
                for seq, _, _ in spans:
                    self.finish(seq, "error", events, message)
                return events
            if self._drafts and prompt_cap is None:
                # Guesses took cells nobody reserved: try again without them (a cap turns
                # guessing off) before any idle chat is evicted or a conversation shifted.
                prompt_cap = ctx.batch.capacity
                continue
            prompt_cap = self._make_pool_room(spans, prompt_cap, events)
        return events

    def _encoder_turn(self, busy: list[Sequence], events: list[Event]) -> Sequence | None:
        """The context holds one encoder output at a time: encoder-decoder sequences take
        turns, the one already encoded first. Returns whose turn it is (None: it failed)."""
        current = [s for s in busy if (s.key, s.seq_id) == self._h.encoded_for]
        turn = (current or busy)[0]
        self._residency.ensure_resident(turn, events, protect={turn.key})
        if turn.seq_id is not None and self._h.encoded_for != (turn.key, turn.seq_id):
            if turn.encoder_input is None or not self._encode(turn):
                self.finish(turn, "error", events, "llama.cpp could not encode the prompt.")
                return None
        return turn

    def _encode(self, seq: Sequence) -> bool:
        ctx = self._h.need_ctx()
        assert seq.seq_id is not None and seq.encoder_input is not None
        if seq.tokens:
            # llama.cpp validates encoder positions against the sequence's cells: encode into
            # an empty sequence and decode what it held again (the encoder output was lost,
            # e.g. by a context rebuild or another sequence's turn).
            ctx.seq_rm(seq.seq_id, -1, -1)
            seq.requeue_all()
        ctx.batch.clear()
        ctx.batch.add_span(seq.encoder_input, 0, seq.seq_id, False)
        ctx.batch.mark_all_outputs()
        ctx.use_prompt_threads(True)  # a prompt's encoding
        if ctx.encode() != 0:
            return False
        self._h.encoded_for = (seq.key, seq.seq_id)
        return True

    def _build_batch(self, events: list[Event], prompt_cap: int | None = None) -> list[Span]:
        h = self._h
        batch = h.need_ctx().batch
        batch.clear()
        self._drafts.clear()
        spans: list[Span] = []
        resident = [
            s
            for s in h.table.by_key.values()
            if s.phase is not Phase.IDLE and s.seq_id is not None and s.pending
        ]
        if h.encoded_for is not None and h.need_model().has_encoder:
            resident = [s for s in resident if (s.key, s.seq_id) == h.encoded_for]
        generating = [s for s in resident if s.phase is Phase.GENERATING]
        prefilling = [s for s in resident if s.phase is not Phase.GENERATING]
        # Rotate both lists so that no sequence waits behind others step after step.
        self._rotation += 1
        if len(generating) > 1:
            r = self._rotation % len(generating)
            generating = generating[r:] + generating[:r]
            if self.batching.mode is BatchMode.TURNS:
                # Where a batch of tokens costs more than the tokens one by one, one
                # generating tab per step, in rotation (prompt chunks still join).
                generating = generating[:1]
        if len(prefilling) > 1:
            r = self._rotation % len(prefilling)
            prefilling = prefilling[r:] + prefilling[:r]
        prompt_room = batch.capacity if prompt_cap is None else prompt_cap
        if generating:
            prompt_room = min(prompt_room, PROMPT_TOKENS_WHILE_GENERATING)
        for seq in generating + prefilling:
            is_generating = seq.phase is Phase.GENERATING
            room = batch.free if is_generating else min(batch.free, prompt_room)
            if room <= 0:
                continue
            if not self._make_room(seq, min(len(seq.pending), room), events):
                continue
            # A chunk ends where a checkpoint is due, so the state can be taken there.
            n_held = len(seq.tokens)
            mark = min((m for m in seq.checkpoint_at if m > n_held), default=None)
            if mark is not None:
                room = min(room, mark - n_held)
            chunk = seq.pending[:room]
            if not is_generating:
                prompt_room -= len(chunk)
            # The last prompt token's logits are always kept (one row): a reply, or a later
            # regenerate, starts from them.
            want_logits = mark == n_held + len(chunk) or len(chunk) == len(seq.pending)
            assert seq.seq_id is not None
            # No guesses while the cache is short of room (they go first then), nor where a
            # checkpoint is due.
            guess = is_generating and mark is None and prompt_cap is None
            drafts = self._guess(seq, batch.free - len(chunk)) if guess else []
            if drafts:
                self._drafts[seq.key] = drafts
                index = batch.add_rows(chunk + drafts, n_held, seq.seq_id)
                spans.append((seq, chunk + drafts, index))
                continue
            index = batch.add_span(chunk, n_held, seq.seq_id, want_logits)
            spans.append((seq, chunk, index if want_logits else None))
        return spans

    def _guess(self, seq: Sequence, batch_room: int) -> list[int]:
        """A generating sequence's guesses for this step, within the batch, its share of
        the context and its reply's length limit (none without speculation)."""
        spec = seq.spec
        if spec is None or len(seq.pending) != 1 or seq.params is None:
            return []
        room = min(batch_room, self._h.n_ctx_seq - len(seq.tokens) - 1)
        if seq.params.max_tokens > 0:
            # every kept guess and the draw after them are reply tokens
            room = min(room, seq.params.max_tokens - len(seq.completion.tokens) - 1)
        if room <= 0:
            return []
        return spec.propose(seq.tokens + seq.pending, room)

    def _after_decode(self, spans: list[Span], elapsed_ms: float, events: list[Event]) -> None:
        ctx = self._h.need_ctx()
        now = time.perf_counter()
        if all(seq.phase is Phase.GENERATING for seq, _, _ in spans):
            # What guesses cost: steps of generated tokens alone (a prompt chunk would
            # swamp the figure).
            for seq, _, _ in spans:
                if seq.spec is not None:
                    seq.spec.timed(elapsed_ms, len(self._drafts.get(seq.key, ())))
        for seq, chunk, index in spans:
            drafts = self._drafts.get(seq.key)
            if drafts is not None and index is not None:
                self._verify(seq, chunk[0], drafts, index, events, now)
                continue
            seq.tokens.extend(chunk)
            del seq.pending[: len(chunk)]
            phase = seq.phase
            if phase is not Phase.GENERATING:
                logits = ctx.logits(index) if index is not None else None
                if logits is not None and not seq.pending:
                    # The prompt's last logits: a regenerated reply starts here without a decode.
                    seq.ready = ReadyLogits(len(seq.tokens), logits.tobytes())
            else:
                logits = None
            if len(seq.tokens) in seq.checkpoint_at:
                seq.checkpoint_at.discard(len(seq.tokens))
                self._snapshots.take_checkpoint(seq, logits)
            if phase is not Phase.GENERATING:
                seq.prompt_done += len(chunk)
                seq.completion.prompt_ms += elapsed_ms
                events.append(PromptProgress(seq.key, seq.prompt_done, seq.prompt_total))
                if logits is not None and phase is Phase.PREFILLING_FOR_LOGITS and not seq.pending:
                    seq.last_logits = logits
                if not seq.pending and phase is not Phase.PREFILLING_TO_GENERATE:
                    seq.prefill_done()
                    events.append(Finished(seq.key, seq.completion))
                    continue
            if index is None or seq.pending:
                continue
            if phase is not Phase.GENERATING:
                seq.first_token(now)
            assert seq.sampler is not None
            self._on_token(seq, seq.sampler.sample(ctx.handle, index), events, now)

    def _verify(
        self,
        seq: Sequence,
        token: int,
        drafts: list[int],
        first_row: int,
        events: list[Event],
        now: float,
    ) -> None:
        """The decode held ``token`` and the guesses after it: draw row by row with the
        sequence's sampler, keep guesses while they equal the draw, cut the cache after."""
        ctx = self._h.need_ctx()
        sampler, spec = seq.sampler, seq.spec
        assert sampler is not None and spec is not None and seq.seq_id is not None
        seq.tokens.append(token)
        seq.pending.clear()
        in_cache = len(seq.tokens) + len(drafts)
        kept = 0
        for row in range(len(drafts) + 1):
            drawn = sampler.sample(ctx.handle, first_row + row)
            self._on_token(seq, drawn, events, now)
            if seq.phase is not Phase.GENERATING:
                break  # finished on this token: it stays queued, as without guesses
            if row == len(drafts) or drawn != drafts[row]:
                break
            kept += 1
            seq.tokens.append(drawn)  # already in the cache: nothing queued for it
            seq.pending.clear()
        if in_cache > len(seq.tokens) and not ctx.seq_rm(seq.seq_id, len(seq.tokens), -1):
            # supported() rules such caches out; should one refuse, decode them again
            log.warning("sequence %d: the rejected guesses could not be removed", seq.key)
            seq.pending = seq.tokens + seq.pending
            seq.set_held(0)
            ctx.seq_rm(seq.seq_id, -1, -1)
        spec.record(len(drafts), kept)
        seq.completion.n_drafted += len(drafts)
        seq.completion.n_accepted += kept

    def _on_token(self, seq: Sequence, token: int, events: list[Event], now: float) -> None:
        model = self._h.need_model()
        completion = seq.completion
        if not completion.n_sampled:
            completion.first_token_at = now
        completion.n_sampled += 1
        completion.last_token_at = now
        # Decoded next step; kept when finishing, so a resume continues exactly.
        seq.pending = [token]
        if model.is_eog(token) or (
            seq.messages is not None and token in self._h.end_markers.tokens
        ):
            # (the second: the template's end-of-turn token that the vocabulary does not
            # count as end of generation)
            self.finish(seq, "eog", events)
            return
        completion.tokens.append(token)
        reply = seq.reply
        assert reply is not None and seq.params is not None
        reply.feed(model.piece(token, special=reply.special_pieces), token, events)
        if reply.stopped:
            self.finish(seq, "stop", events)
        elif 0 < seq.params.max_tokens <= len(completion.tokens):
            self.finish(seq, "length", events)

    def finish(
        self, seq: Sequence, reason: str, events: list[Event], error: str | None = None
    ) -> None:
        """Any phase -> IDLE: the turn ended (``reason`` is the completion's finish reason)."""
        generated = seq.phase is Phase.GENERATING
        reply, seq.reply = seq.reply, None
        if reply is not None:
            reply.close(reason == "stop", generated, events)
            if generated:
                seq.completion.gen_ms = (time.perf_counter() - reply.t_start) * 1000.0
        if (
            generated
            and reason in ("eog", "stop", "length")
            and seq.seq_id is not None
            and self._h.traits.needs_checkpoints
        ):
            self._snapshots.take_checkpoint(seq, None)  # after the reply: the next turn starts here
        seq.checkpoint_at.clear()
        if reason in ("eog", "stop") and seq.completion.tool_calls:
            reason = "tool_calls"  # the reply ended with calls: the client runs them
        seq.completion.finish_reason = reason
        seq.completion.error = error
        seq.finish()
        self._h.table.touch(seq)
        if error is not None:
            events.append(SequenceFailed(seq.key, error))
        events.append(Finished(seq.key, seq.completion))

    # ------------------------------------------------------------ failed decodes and room

    def _resync(self, spans: list[Span]) -> None:
        """After a failed decode, make the bookkeeping match the cache again.

        Aborted and fatal decodes keep the micro-batches that finished; a "no slot" decode
        keeps nothing. ``seq_pos_max`` tells which, per sequence.
        """
        ctx = self._h.need_ctx()
        for seq, chunk, _ in spans:
            assert seq.seq_id is not None
            held = ctx.seq_pos_max(seq.seq_id) + 1
            base = len(seq.tokens)
            if seq.key in self._drafts:
                # Guesses are never kept unverified: only the sampled token counts.
                if held > base + 1:
                    ctx.seq_rm(seq.seq_id, base + 1, -1)
                    held = base + 1
                chunk = chunk[:1]
            if held < base:  # the cache lost cells we counted: process them again
                seq.pending = seq.tokens[held:] + seq.pending
                seq.set_held(held)
                continue
            done = min(len(chunk), held - base)
            if done:
                seq.tokens.extend(chunk[:done])
                del seq.pending[:done]
                if seq.phase is not Phase.GENERATING:
                    seq.prompt_done += done
            if done and not seq.pending and (seq.want_generation or seq.want_logits):
                # Its logits were never read: decode the last token again (from a
                # checkpoint where the cache cannot drop one token).
                self._snapshots.queue_for_logits(seq)

    def _make_pool_room(
        self, spans: list[Span], prompt_cap: int | None, events: list[Event]
    ) -> int | None:
        """The cache had no free cells for the batch: evict, shrink the prompt part, or shift.

        Returns the prompt-token cap for the next attempt.
        """
        if self._residency.evict_lru_idle(events):
            return prompt_cap
        prompt_tokens = sum(
            len(chunk) for seq, chunk, _ in spans if seq.phase is not Phase.GENERATING
        )
        if prompt_tokens > 1:
            return prompt_tokens // 2
        largest = max((s for s, _, _ in spans), key=lambda s: len(s.tokens))
        if self._h.table.policy(largest) is ContextFullPolicy.SHIFT and self._shifter.shift(
            largest, max(1, len(largest.tokens) // 2), events
        ):
            return prompt_cap
        self.finish(largest, "context_full", events, _CONTEXT_FULL)
        return prompt_cap

    def _make_room(self, seq: Sequence, n_new: int, events: list[Event]) -> bool:
        """Make sure ``n_new`` more tokens fit in this sequence's share of the context."""
        limit = self._h.n_ctx_seq
        if len(seq.tokens) + n_new <= limit:
            return True
        generating = seq.phase is Phase.GENERATING
        if generating and self._h.table.policy(seq) is ContextFullPolicy.SHIFT:
            if self._shifter.shift(seq, len(seq.tokens) + n_new - limit, events):
                return True
        self.finish(
            seq,
            "context_full",
            events,
            None
            if generating
            else "The prompt does not fit in the context; raise the context size.",
        )
        return False
