"""Hub faults as sentences: what happened and what to do, never a traceback or a token."""

from __future__ import annotations

import errno

import httpx2
from huggingface_hub import errors as hf_errors

from app.errors import LlamaDeskError


class HubError(LlamaDeskError):
    """A Hub operation failed; ``str()`` is a sentence. ``retryable`` says whether trying
    again later may help (network, 5xx, stall) as opposed to a fault only the user can fix."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None):
        super().__init__(message)
        self.retryable = retryable
        self.status = status


class NoGGUFFilesError(HubError):
    """The repository exists but holds no ``.gguf`` file."""


class UnsafeFileNameError(HubError):
    """A file name that would be written outside the library folder."""


class ChecksumMismatchError(HubError):
    """The downloaded bytes do not match the SHA-256 the Hub publishes."""


class DiskSpaceError(HubError):
    """Not enough free space, before or while writing."""


GATED_HINT = (
    "accept the licence on the model page, then add a token "
    "(Settings -> Preferences -> Hugging Face, or HF_TOKEN)"
)


def _status(exc: BaseException) -> int | None:
    response = getattr(exc, "response", None)
    code = getattr(response, "status_code", None)
    return int(code) if isinstance(code, int) else None


def describe(exc: BaseException, repo_id: str, filename: str | None = None) -> HubError:
    """Turn whatever huggingface_hub / httpx2 / the OS raised into a :class:`HubError`."""
    if isinstance(exc, HubError):
        return exc
    what = f"{filename} from {repo_id}" if filename else repo_id
    status = _status(exc)
    if isinstance(exc, hf_errors.GatedRepoError):
        return HubError(
            f"{repo_id} is a gated model: {GATED_HINT} (a token of an account that was "
            "granted access).",
            status=status,
        )
    if isinstance(exc, hf_errors.RepositoryNotFoundError):
        if status == 401:
            return HubError(
                f"{repo_id} was not found, or it is private or gated and needs a token: check "
                f"the name; if it is gated, {GATED_HINT}.",
                status=status,
            )
        return HubError(
            f"There is no model repository {repo_id} on the Hub: check the name.", status=status
        )
    if isinstance(exc, hf_errors.RevisionNotFoundError):
        return HubError(
            f"{repo_id} has no such revision: check the branch or commit.", status=status
        )
    if isinstance(exc, hf_errors.EntryNotFoundError):
        return HubError(
            f"{repo_id} has no file named {filename or 'like that'}: check the name against "
            "the repository's file list.",
            status=status,
        )
    if isinstance(exc, hf_errors.HfHubHTTPError) or status is not None:
        return from_status(status or 0, repo_id, filename)
    if isinstance(exc, httpx2.TimeoutException):
        return HubError(
            f"The download of {what} stalled: no data arrived for too long. It will be "
            "resumed where it stopped.",
            retryable=True,
        )
    if isinstance(exc, httpx2.ConnectError):
        return HubError(
            f"The Hub cannot be reached ({_short(exc)}): check the network connection "
            "(or the Hub address in the settings) and try again.",
            retryable=True,
        )
    if isinstance(exc, httpx2.TransportError):
        return HubError(
            f"The connection broke while downloading {what} ({_short(exc)}); the part "
            "already downloaded is kept and the download resumes from there.",
            retryable=True,
        )
    if isinstance(exc, OSError) and exc.errno == errno.ENOSPC:
        return DiskSpaceError(
            f"The disk is full while writing {what}: free some space, then resume "
            "(the part already downloaded is kept)."
        )
    if isinstance(exc, OSError):
        return HubError(f"Cannot write {what}: {exc.strerror or exc}.")
    return HubError(f"Talking to the Hub about {what} failed ({_short(exc)}).")


def from_status(status: int, repo_id: str, filename: str | None = None) -> HubError:
    what = f"{filename} from {repo_id}" if filename else repo_id
    if status in (401, 403):
        return HubError(
            f"The Hub refused access to {what} ({status}): the model may be gated or private; "
            f"{GATED_HINT}.",
            status=status,
        )
    if status == 404:
        return HubError(f"{what} was not found on the Hub (404): check the name.", status=status)
    if status in (408, 429) or status >= 500:
        return HubError(
            f"The Hub had a problem serving {what} (HTTP {status}); try again in a while "
            "(the part already downloaded is kept).",
            retryable=True,
            status=status,
        )
    return HubError(f"The Hub answered HTTP {status} for {what}.", status=status)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    return text[:160]
