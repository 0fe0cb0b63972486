"""``/tokenize``, ``/detokenize``, ``/apply-template`` and ``/v1/embeddings``.

Texts are tokenized and rendered on the request's thread (:mod:`app.server.prompts`);
only the embedding decode itself runs on the session thread.
"""

from __future__ import annotations

import base64
from array import array
from typing import Any

from app.engine import Engine
from app.engine.tokenizer import TextTooLongError
from app.server.admission import Admission
from app.server.errors import ApiError, bad_request, unavailable
from app.server.params import expect_object, get_bool, get_str, parse_chat
from app.server.prompts import RequestVocab
from app.server.reply_items import Gone
from app.server.served_model import ServedModel

MAX_EMBED_INPUTS = 2048
TOKENIZE_MIN_LIMIT = 1 << 16


class TextEndpoints:
    def __init__(self, served: ServedModel, vocab: RequestVocab, admission: Admission) -> None:
        self._served = served
        self._vocab = vocab
        self._admission = admission

    def tokenize(self, body: Any) -> dict[str, Any]:
        body = expect_object(body)
        content = get_str(body, "content")
        if content is None:
            raise bad_request("'content' (the text to tokenize) is required.", "content")
        add_special = get_bool(body, "add_special", False)
        parse_special = get_bool(body, "parse_special", True)
        with_pieces = get_bool(body, "with_pieces", False)
        # Up to the context, or 65,536 tokens: more than a request could use, and a
        # bound on the time a hostile text (a long run without spaces) holds the model.
        limit = max(self._served.get().n_ctx, TOKENIZE_MIN_LIMIT)
        try:
            tokens = self._vocab.tokenize(
                content, limit, add_special=add_special, parse_special=parse_special
            )
        except TextTooLongError as exc:
            raise bad_request(
                f"The text has at least {exc.at_least:,} tokens; /tokenize answers for at "
                f"most {limit:,} (this server's context, at least {TOKENIZE_MIN_LIMIT:,}). "
                "Send it in parts.",
                "content",
            ) from None
        if not with_pieces:
            return {"tokens": tokens}
        return {"tokens": [{"id": t, "piece": self._vocab.detokenize([t])} for t in tokens]}

    def detokenize(self, body: Any) -> dict[str, Any]:
        body = expect_object(body)
        tokens = self._vocab.checked_tokens(body.get("tokens"), "tokens")
        return {"content": self._vocab.detokenize(tokens)}

    def apply_template(self, body: Any) -> dict[str, Any]:
        req = parse_chat(body)
        return {"prompt": self._vocab.render_chat(req)}

    def embeddings(self, body: Any, gone: Gone, model_id: str) -> dict[str, Any]:
        body = expect_object(body)
        model = self._served.get()
        if not model.settings.embeddings:
            raise bad_request(
                "This server's context does not compute embeddings: start it with "
                "`llamadesk serve --embeddings` (a context for embeddings).",
                "input",
                "embeddings_disabled",
            )
        if model.settings.pooling_type in ("none", "rank"):
            raise bad_request(
                f"This server's context pools embeddings with '{model.settings.pooling_type}', "
                "which gives no embedding vector per input: start it with "
                "`--pooling mean` (or cls, last).",
                "input",
                "pooling_unsupported",
            )
        raw = body.get("input")
        texts = [raw] if isinstance(raw, str) else raw
        if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
            raise bad_request("'input' must be a string or a non-empty array of strings.", "input")
        if len(texts) > MAX_EMBED_INPUTS:
            raise bad_request(f"At most {MAX_EMBED_INPUTS} inputs per request.", "input")
        if any(not t for t in texts):
            raise bad_request("An input is empty.", "input")
        fmt = get_str(body, "encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise bad_request("'encoding_format' must be float or base64.", "encoding_format")
        # One decode holds a whole input: the context per sequence and the micro-batch
        # (pooling needs every token in one) bound it, as in app.engine.embeddings.
        limit = min(model.n_ctx_seq, model.settings.n_batch, model.settings.n_ubatch)
        n_tokens = 0
        for i, text in enumerate(texts):
            try:
                n_tokens += len(
                    self._vocab.tokenize(text, limit, add_special=True, parse_special=False)
                )
            except TextTooLongError as exc:
                raise ApiError(
                    400,
                    f"Input {i} has at least {exc.at_least:,} tokens; an embedding takes at "
                    f"most {limit:,} (the micro-batch size of this context).",
                    param="input",
                    code="context_length_exceeded",
                ) from None

        def work(engine: Engine) -> list[list[float]]:
            if engine.has_work():
                raise unavailable(
                    "Embeddings are computed between generations and the model is generating; "
                    "retry shortly.",
                    "busy",
                )
            vectors = engine.embed(list(texts), normalize=True)
            return [[float(x) for x in v] for v in vectors]

        self._admission.enter(gone)
        try:
            vectors = self._served.call(work)
        finally:
            self._admission.leave()
        data = []
        for i, vector in enumerate(vectors):
            embedding: Any = vector
            if fmt == "base64":
                embedding = base64.b64encode(array("f", vector).tobytes()).decode("ascii")
            data.append({"object": "embedding", "index": i, "embedding": embedding})
        return {
            "object": "list",
            "data": data,
            "model": model_id,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
        }
