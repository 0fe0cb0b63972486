"""``serve --remote URL``: the routes a front answers by asking the remote server.

Chat turns go through the session (stored, with the request log); the routes here have
no conversation and no in-process model to run on, so they are forwarded to the server
that holds the model: ``/v1/completions`` (streamed or not), ``/tokenize``,
``/detokenize`` and ``/apply-template`` (llama-server's and LlamaDesk's; another server
that lacks one gets a sentence). ``/props`` is this front's own, with the remote model's
context and chat template. The client's ``model`` name is replaced by the remote model's
id (a front accepts any name, as a local server does; the remote server may not).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx2

from app.remote.connection import RemoteConnection
from app.remote.faults import (
    FaultKind,
    RemoteError,
    RemoteFault,
    malformed,
    status_fault,
    transport_fault,
)
from app.remote.loader import new_client
from app.remote.probe import ServerTraits
from app.server.errors import ApiError

# A front's forwarded requests each take a connection of their own (no pinned slot).
KEEP_ALIVE = 8


# The remote's refusals that are about the client's request (it was wrong there too);
# any other 4xx (a key or URL the front was given) is the front's fault: a bad gateway,
# so a client is never told that its own key is wrong.
_CLIENTS_FAULT = (FaultKind.BAD_REQUEST, FaultKind.RATE_LIMITED)


def _api_error(error: RemoteError) -> ApiError:
    """The status a client of the front gets: the remote's refusal of the request as it
    is, a bad gateway for a server down, failing or misconfigured here, 504 for one too
    slow."""
    fault = error.fault
    if fault.status is not None and fault.kind in _CLIENTS_FAULT:
        return ApiError(fault.status, fault.message, code=fault.kind.value)
    status = 504 if fault.kind in (FaultKind.READ_TIMEOUT, FaultKind.CONNECT_TIMEOUT) else 502
    return ApiError(status, fault.message, type="server_error", code=fault.kind.value)


class RemoteFront:
    """Forwards one request at a time per call, on the calling (request) thread."""

    def __init__(self, conn: RemoteConnection, traits: ServerTraits) -> None:
        self.conn = conn
        self.traits = traits
        self._client = new_client(conn, KEEP_ALIVE, httpx2.create_ssl_context())

    def close(self) -> None:
        self._client.close()

    def _body(self, body: Any) -> Any:
        if isinstance(body, dict) and "model" in body:
            return {**body, "model": self.traits.model}
        return body

    def post(self, route: str, body: Any) -> Any:
        """The remote server's JSON answer to ``body`` on ``route``."""
        return self._answer(route, body)

    def get(self, route: str) -> Any:
        """The remote server's JSON answer to a GET of ``route``."""
        return self._answer(route, None)

    def _answer(self, route: str, body: Any) -> Any:
        try:
            if body is None:
                response = self._client.get(self.conn.root + route)
            else:
                response = self._client.post(self.conn.root + route, json=self._body(body))
        except httpx2.HTTPError as exc:
            raise _api_error(
                RemoteError(transport_fault(self.conn.label, exc, streaming=False))
            ) from None
        if response.status_code in (404, 405, 501) and route != "/v1/completions":
            raise ApiError(
                501,
                f"The remote server {self.conn.label} ({self.traits.kind.value}) does not "
                f"offer {route}, so this front cannot either.",
                type="server_error",
                code="not_supported",
            )
        if response.status_code != 200:
            fault = status_fault(
                self.conn.label, response.status_code, response.text, response.headers
            )
            raise _api_error(RemoteError(fault))
        try:
            answer = response.json()
        except ValueError:
            answer = None
        if not isinstance(answer, dict):  # every forwarded route answers a JSON object
            raise _api_error(RemoteError(malformed(self.conn.label, "a JSON object")))
        return answer

    def completions(self, body: dict[str, Any], stream: bool) -> Any:
        """``/v1/completions`` on the remote server: its JSON answer, or (``stream``) an
        iterator of its events. Errors before the first event are raised (ApiError); a
        stream that breaks off ends with an error event."""
        if not stream:
            return self.post("/v1/completions", body)
        request = self._client.build_request(
            "POST", self.conn.root + "/v1/completions", json=self._body(body)
        )
        try:
            response = self._client.send(request, stream=True)
        except httpx2.HTTPError as exc:
            raise _api_error(
                RemoteError(transport_fault(self.conn.label, exc, streaming=False))
            ) from None
        if response.status_code != 200:
            text = response.read().decode("utf-8", "replace")
            response.close()
            fault = status_fault(self.conn.label, response.status_code, text, response.headers)
            raise _api_error(RemoteError(fault))
        return self._events(response)

    def _events(self, response: httpx2.Response) -> Iterator[dict[str, Any]]:
        try:
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                data = line[5:].strip()
                if data == "[DONE]":
                    return
                try:
                    event = json.loads(data)
                except ValueError:
                    fault = malformed(self.conn.label, "an event stream")
                    yield _api_error(RemoteError(fault)).body()
                    return
                if isinstance(event, dict):
                    yield event
            # the stream ended without [DONE]: the remote server was cut off
            yield _api_error(RemoteError(_dropped(self.conn.label))).body()
        except httpx2.HTTPError as exc:
            fault = transport_fault(self.conn.label, exc, streaming=True)
            yield _api_error(RemoteError(fault)).body()
        finally:
            response.close()


def _dropped(label: str) -> RemoteFault:
    return RemoteFault(
        FaultKind.DROPPED, f"The connection to {label} broke off before the reply ended."
    )
