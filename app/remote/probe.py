"""What the server at the other end is, and what it can do for a conversation.

:func:`probe` asks a few small questions before the first turn and answers with
:class:`ServerTraits`:

- ``/v1/models``: the models (and the API key: a 401 here is said at once); vLLM lists
  ``max_model_len`` there and owns its models as ``vllm``;
- ``/props``: llama-server and LlamaDesk (context size per slot, the chat template, the
  number of slots, the build); they also ``/tokenize``, keep ``cache_prompt`` and report
  ``timings.cache_n``; only llama-server takes ``id_slot`` and ``return_progress``;
- ``/api/version``: Ollama (``keep_alive`` keeps the model loaded between turns);
- anything else is a plain OpenAI-compatible server: usage only.

Whether cached prompt tokens are reported is known for llama-server and LlamaDesk; vLLM
reports them only when started with ``--enable-prompt-tokens-details`` and Ollama since
its 2026-08 releases, so for those the first reply tells (:attr:`ServerTraits.reports_cached`
is None until then).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any

import httpx2

from app.engine import ContextSettings, ModelInfo
from app.remote.connection import PROBE_TIMEOUT_S, RemoteConnection
from app.remote.faults import FaultKind, RemoteError, RemoteFault, status_fault, transport_fault
from app.remote.slots import probe_slot_files
from app.session.types import LoadedModel


class ServerKind(enum.Enum):
    LLAMA_SERVER = "llama-server"
    LLAMADESK = "LlamaDesk"
    VLLM = "vLLM"
    OLLAMA = "Ollama"
    OPENAI = "OpenAI-compatible"


@dataclass(frozen=True)
class ServerTraits:
    kind: ServerKind
    models: tuple[str, ...]
    model: str  # the one this engine talks to
    version: str = ""  # the server's build or version, where it says
    n_ctx: int | None = None  # context per conversation (None: the server does not say)
    chat_template: str | None = None
    total_slots: int = 0  # llama-server's slots (0: no slots to pin a conversation to)
    can_tokenize: bool = False
    reports_cached: bool | None = None  # None: unknown until a reply says
    reports_progress: bool = False  # prompt progress chunks (llama-server's return_progress)
    slot_files: bool = False  # slots saved to and restored from files (--slot-save-path)
    token_prompts: bool = False  # /apply-template and token prompts on /completion
    bos_token: str = ""  # the texts of the model's BOS and EOS (its template reads them)
    eos_token: str = ""

    @property
    def keeps_prompt_cache(self) -> bool:
        """Whether ``cache_prompt`` is understood (llama-server's and LlamaDesk's)."""
        return self.kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMADESK)

    @property
    def counts_tokens(self) -> bool:
        """Whether a prompt's tokens can be counted as the server reads them: llama-server's
        and LlamaDesk's ``/apply-template`` and ``/tokenize`` (vLLM's take other bodies)."""
        return self.kind in (ServerKind.LLAMA_SERVER, ServerKind.LLAMADESK) and self.can_tokenize

    @property
    def pins_slots(self) -> bool:
        """Whether a conversation can be pinned to a slot with ``id_slot``."""
        return self.kind is ServerKind.LLAMA_SERVER and self.total_slots > 0

    def unavailable(self) -> tuple[str, ...]:
        """Sentences for what this server does not give (shown instead of the figure)."""
        out: list[str] = []
        if self.n_ctx is None:
            out.append(f"{self.kind.value} does not say its context size: no context meter.")
        if self.reports_cached is False:
            out.append(f"{self.kind.value} does not report cached prompt tokens.")
        elif self.reports_cached is None:
            hint = (
                " (vLLM does with --enable-prompt-tokens-details)"
                if self.kind is ServerKind.VLLM
                else ""
            )
            out.append(
                f"Whether {self.kind.value} reports cached prompt tokens shows with the first "
                f"reply{hint}."
            )
        if not self.reports_progress:
            out.append(f"{self.kind.value} does not report prompt progress.")
        return tuple(out)


def probe_timeout(conn: RemoteConnection) -> httpx2.Timeout:
    return httpx2.Timeout(PROBE_TIMEOUT_S, connect=conn.connect_timeout_s)


def _get(client: httpx2.Client, conn: RemoteConnection, route: str) -> httpx2.Response | None:
    """GET ``route``; None for a route the server lacks (404, 405, 501, not JSON)."""
    try:
        response = client.get(conn.root + route, timeout=probe_timeout(conn))
    except httpx2.HTTPError as exc:
        raise RemoteError(transport_fault(conn.label, exc, streaming=False)) from None
    if response.status_code in (401, 403):
        raise RemoteError(
            status_fault(conn.label, response.status_code, response.text, response.headers)
        )
    if response.status_code != 200:
        return None
    return response


def _json(response: httpx2.Response | None) -> Any:
    if response is None:
        return None
    try:
        return response.json()
    except ValueError:
        return None


def _models(data: Any) -> list[dict[str, Any]]:
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        return [m for m in data["data"] if isinstance(m, dict) and isinstance(m.get("id"), str)]
    return []


def _positive_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def _renders(client: httpx2.Client, conn: RemoteConnection) -> bool:
    """Whether ``/apply-template`` renders a chat (llama-server's; the token route)."""
    try:
        response = client.post(
            conn.root + "/apply-template",
            json={"messages": [{"role": "user", "content": "hi"}]},
            timeout=probe_timeout(conn),
        )
    except httpx2.HTTPError:
        return False
    data = _json(response) if response.status_code == 200 else None
    return isinstance(data, dict) and isinstance(data.get("prompt"), str)


def _file_name(model_id: str) -> str:
    return model_id.replace("\\", "/").rpartition("/")[2]


def _named_model(conn: RemoteConnection, wanted: str, names: tuple[str, ...]) -> str:
    """The listed id that ``wanted`` names by its file name: llama-server lists a model by
    the path it was started with (``/models/qwen.gguf``), where a user writes the file's
    name, with or without ``.gguf``. A name no id has, or that two ids share, is an error."""
    stem = wanted.removesuffix(".gguf")
    matches = [
        n for n in names if _file_name(n) in (wanted, stem) or _file_name(n) == f"{stem}.gguf"
    ]
    if len(matches) == 1:
        return matches[0]
    if matches:
        raise RemoteError(
            RemoteFault(
                FaultKind.NOT_FOUND,
                f"{conn.label} has {len(matches)} models named {wanted!r}: give the full id "
                f"({', '.join(matches)}).",
            )
        )
    raise RemoteError(
        RemoteFault(
            FaultKind.NOT_FOUND,
            f"{conn.label} has no model {wanted!r}; it has: {', '.join(names)}.",
        )
    )


def probe(client: httpx2.Client, conn: RemoteConnection) -> ServerTraits:
    """See the module docstring; raises :class:`RemoteError` when the server cannot be used."""
    listed = _get(client, conn, "/v1/models")
    if listed is None:
        raise RemoteError(
            RemoteFault(
                FaultKind.NOT_FOUND,
                f"{conn.root} does not answer /v1/models: is it an OpenAI-compatible server "
                "(llama-server, vLLM, Ollama, LM Studio, LlamaDesk)?",
            )
        )
    models = _models(_json(listed))
    names = tuple(str(m["id"]) for m in models)
    model = conn.model or (names[0] if names else "")
    if conn.model is not None and names and conn.model not in names:
        model = _named_model(conn, conn.model, names)
    if not model:
        raise RemoteError(
            RemoteFault(
                FaultKind.NOT_FOUND,
                f"{conn.label} lists no model: give one with the model name.",
            )
        )
    entry = next((m for m in models if m["id"] == model), {})
    props = _json(_get(client, conn, "/props"))
    if isinstance(props, dict) and isinstance(props.get("default_generation_settings"), dict):
        build = str(props.get("build_info") or "")
        kind = ServerKind.LLAMADESK if build.startswith("LlamaDesk") else ServerKind.LLAMA_SERVER
        template = props.get("chat_template")
        slots = _positive_int(props.get("total_slots")) or 0
        return ServerTraits(
            kind=kind,
            models=names,
            model=model,
            version=build,
            n_ctx=_positive_int(props["default_generation_settings"].get("n_ctx")),
            chat_template=template if isinstance(template, str) and template else None,
            total_slots=slots,
            can_tokenize=True,
            reports_cached=True,
            reports_progress=kind is ServerKind.LLAMA_SERVER,
            slot_files=kind is ServerKind.LLAMA_SERVER
            and slots > 0
            and probe_slot_files(client, conn),
            token_prompts=kind is ServerKind.LLAMA_SERVER and _renders(client, conn),
            bos_token=str(props.get("bos_token") or ""),
            eos_token=str(props.get("eos_token") or ""),
        )
    if entry.get("owned_by") == "vllm":
        version = _json(_get(client, conn, "/version"))
        return ServerTraits(
            kind=ServerKind.VLLM,
            models=names,
            model=model,
            version=str(version.get("version", "")) if isinstance(version, dict) else "",
            n_ctx=_positive_int(entry.get("max_model_len")),
            can_tokenize=True,
        )
    ollama = _json(_get(client, conn, "/api/version"))
    if isinstance(ollama, dict) and isinstance(ollama.get("version"), str):
        return ServerTraits(
            kind=ServerKind.OLLAMA, models=names, model=model, version=ollama["version"]
        )
    return ServerTraits(kind=ServerKind.OPENAI, models=names, model=model)


def loaded_model(
    traits: ServerTraits, fingerprint: str, engine: str, address: str | None = None
) -> LoadedModel:
    """What the session says is loaded: the remote model by name (its path: ``address``,
    else the name), the context the server gives each conversation (0: it does not say),
    no file, no local memory."""
    n_ctx = traits.n_ctx or 0
    info = ModelInfo(
        path=address or traits.model,
        size_bytes=0,
        architecture="remote",
        name=traits.model,
        n_params=0,
        file_type=traits.kind.value,
        n_ctx_train=n_ctx,
        n_layer=0,
        n_embd=0,
        n_head=0,
        n_head_kv=0,
        head_dim_k=0,
        head_dim_v=0,
        n_vocab=0,
        tokenizer="remote",
        chat_template=traits.chat_template,
        bos_token="",
        eos_token="",
        bos_token_id=-1,
        eos_token_id=-1,
        has_encoder=False,
    )
    return LoadedModel(
        info=info,
        settings=ContextSettings(),
        fingerprint=fingerprint,
        model_bytes=0,
        kv_bytes=0,
        n_ctx=n_ctx,
        n_ctx_seq=n_ctx,
        supports_thinking_toggle=False,
        supports_effort=False,
        engine=engine,
    )
