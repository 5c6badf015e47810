"""Reading what the PostgreSQL store sends, for the tests that check it."""

from __future__ import annotations

import struct


def bytea_elements(data: bytes | None) -> list[bytes | None] | None:
    """A one-dimensional binary ``bytea[]``'s elements (its header, then each element's length
    and bytes, as the server's ``array_recv`` reads them); None for a NULL array."""
    if data is None:
        return None
    (n,) = struct.unpack_from("!i", data, 12)
    out: list[bytes | None] = []
    at = 20
    for _ in range(n):
        (size,) = struct.unpack_from("!i", data, at)
        out.append(None if size < 0 else data[at + 4 : at + 4 + size])
        at += 4 + max(size, 0)
    return out
