"""Typed errors raised at the engine's boundaries. Every message says what is wrong and what to do."""

from __future__ import annotations


class CosyVoiceError(Exception):
    """Base class of every error this package raises on purpose.

    Picklable whatever a subclass's constructor takes (an engine replica's error crosses a process boundary
    to the ingress as itself): it is rebuilt from its class, message and attributes, not by calling `__init__`.
    """

    def __reduce__(self):
        return _rebuild, (type(self), self.args, dict(self.__dict__))


def _rebuild(cls: type, args: tuple, state: dict) -> CosyVoiceError:
    error = cls.__new__(cls)
    Exception.__init__(error, *args)
    error.__dict__.update(state)
    return error


class ConfigError(CosyVoiceError):
    """A model folder or its yaml is not what we expect (wrong family, bad value, unreadable)."""


class CheckpointError(CosyVoiceError):
    """A weight or ONNX file is missing, unreadable or does not match the architecture."""


class InvalidRequest(CosyVoiceError):
    """The user's request cannot be served as given.

    `code` is a stable machine-readable reason (the UI translates by it, the API returns it) and
    `params` holds the numbers the message mentions, so a translation can restate them.
    """

    def __init__(self, code: str, message: str, **params: object) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.params = params


class Cancelled(CosyVoiceError):
    """The caller asked to stop the job (Stop button, client went away)."""


class DownloadError(CosyVoiceError):
    """A model could not be downloaded (offline, not found, disk full)."""


class RecognizerFailed(CosyVoiceError):
    """The speech recogniser stopped or failed while working (it starts again for the next recording)."""

    code = "asr_failed"
