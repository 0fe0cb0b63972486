"""The keyless server's ``Host`` check uses the one loopback rule (:mod:`app.loopback`):
a literal loopback address is this computer, a ``*.localhost`` name (which a web page can
have resolved to anything) is not."""

from __future__ import annotations

import httpx2
import pytest


@pytest.mark.parametrize("host", ["127.0.0.2", "[::1]", "localhost", "localhost."])
def test_a_literal_loopback_host_is_answered(http: httpx2.Client, host: str) -> None:
    assert http.get("/v1/models", headers={"Host": f"{host}:8080"}).status_code == 200


@pytest.mark.parametrize("host", ["evil.localhost", "localhost.evil.example", "10.0.0.2"])
def test_a_host_that_needs_resolving_is_refused(http: httpx2.Client, host: str) -> None:
    assert http.get("/v1/models", headers={"Host": f"{host}:8080"}).status_code == 403
