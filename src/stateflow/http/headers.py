"""Header text as both HTTP doors (the REST API and ``/mcp``) read it."""

from __future__ import annotations

from stateflow.errors import BadRequest


def header_text(name: str, raw: bytes) -> str:
    """A header's value as the UTF-8 its bytes are (HTTP hands them over as Latin-1, which would
    read a client's UTF-8 text as mojibake). A value that is not UTF-8 is a malformed request, the
    same 400 ``bad-request`` on every door, naming the header in its usual spelling."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise BadRequest(
            f"{name.title()} must be UTF-8 (the text's own bytes, not percent-encoded)"
        ) from None
