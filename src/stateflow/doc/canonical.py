"""Canonical JSON: one encoding, one notion of equality, one set of kind names."""

from __future__ import annotations

import json
import math
import re
import sys
from collections.abc import Hashable, Iterator
from typing import Any, Final

import orjson

from stateflow.doc.sparse import Sparse
from stateflow.errors import InvalidJSON, NotJSON

JSON = Any
"""A JSON value as plain Python: dict[str, JSON] | list[JSON] | str | int | float | bool | None."""

KINDS: Final = ("object", "array", "string", "number", "boolean", "null")

_INT_MIN: Final = -(2**63)
_INT_MAX: Final = 2**64 - 1
MAX_DEPTH: Final = 254
"""Containers nest at most this deep (orjson's limit): deeper values cannot be stored. A value
inside an envelope (an answer's ``{"data": …}``, a diff's ops) may sit deeper than that: its
encoding falls back to the standard library's encoder (see :func:`encode_trusted`)."""

_ORJSON_TOO_DEEP: Final = "Recursion limit reached"
_SURROGATE: Final = re.compile("[\ud800-\udfff]")
_surrogate_in: Final = _SURROGATE.search  # (bound once: the check's loops call it per string)


def utf8_text(value: str) -> bool:
    """Whether ``value`` is text JSON can carry: JSON's ``\\ud800`` escape, and Python, make a
    lone surrogate, which UTF-8 cannot encode (``str.isascii`` answers in constant time)."""
    return value.isascii() or _surrogate_in(value) is None


def shown(value: object) -> str:
    """``value`` as a message shows it: the JSON the caller sent (``true``, not Python's
    ``True``), or its ``repr`` where JSON has no form for it (a Python caller's object)."""
    try:
        return orjson.dumps(value).decode()
    except TypeError:
        return repr(value)


def encode(value: JSON) -> bytes:
    """Compact UTF-8 JSON bytes; key order is preserved. Refuses what JSON cannot carry, as
    :func:`check` does (its lone surrogate test is the encoding's own: see :func:`checked_copy`)."""
    if not _plain(value, 0, False):
        _explain(value, "$")
    try:
        return orjson.dumps(value)
    except TypeError:
        _explain(value, "$")  # a lone surrogate is named; deep nesting is encoded below
        return encode_trusted(value)


def encode_trusted(value: JSON) -> bytes:
    """Encode a value already known to be valid JSON (checked on its way in).

    A document may nest :data:`MAX_DEPTH` levels, which is all orjson encodes: one carried in
    an envelope (a record in an answer) is deeper, and is encoded by the standard library
    instead, so that everything stored can be answered (the same JSON; only a float's exponent
    may be spelled otherwise, ``1e+16`` for ``1e16``)."""
    try:
        return orjson.dumps(value)
    except TypeError as exc:  # a value slipped past the checks: refuse rather than store junk
        if str(exc) == _ORJSON_TOO_DEEP:
            return _encode_deep(value, None)
        raise InvalidJSON(f"value is not JSON: {exc}") from exc


def encode_indented(value: JSON) -> bytes:
    """:func:`encode_trusted` indented by two spaces (what a terminal shows)."""
    try:
        return orjson.dumps(value, option=orjson.OPT_INDENT_2)
    except TypeError as exc:
        if str(exc) == _ORJSON_TOO_DEEP:
            return _encode_deep(value, 2)
        raise InvalidJSON(f"value is not JSON: {exc}") from exc


def _encode_deep(value: JSON, indent: int | None) -> bytes:
    """A value nested deeper than orjson encodes, by the standard library's encoder (its depth
    is bounded by the interpreter's recursion limit, four times orjson's)."""
    separators = (",", ": ") if indent else (",", ":")
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, indent=indent, separators=separators)
        return text.encode()
    except (TypeError, ValueError, RecursionError) as exc:  # (UnicodeEncodeError is a ValueError)
        raise InvalidJSON(f"value is not JSON: {exc}") from exc


def decode(
    data: bytes | bytearray | memoryview | str, *, exact_integers: bool = False, nonfinite: bool = False
) -> JSON:
    """Parse strict JSON (orjson refuses NaN, Infinity, trailing garbage), refusing what
    :func:`check` refuses of a number: an integer outside the range JSON stores.

    ``exact_integers``: such an integer is kept, exactly, for the caller to refuse — a payload
    whose values the service checks itself (an op batch, a search filter), so that its refusal
    names the place as the service names it for every caller, not from the payload's root.
    ``nonfinite``: ``NaN``/``Infinity`` tokens are read as the numbers they name, for the caller
    to refuse naming the place — as the MCP doors read a tool call's arguments
    (:func:`read_as_sent`), so a tool called from the CLI is refused with the very text they get."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        if str(exc).startswith("depth limit exceeded"):
            # JSON nested past the parser's own limit (1024) is, first of all, deeper than a
            # document may be: refused as the value is from 255 levels on, not as unparseable
            raise InvalidJSON(
                f"{_run_cut(_too_deep_at(data))}: nested deeper than {MAX_DEPTH} levels, which JSON storage refuses"
            ) from exc
        if str(exc).startswith("number is infinity"):
            # a number literal past a double's range (orjson reads every integer beyond 64
            # bits as a double): refused as what it is, where it is, as a parsed one would be —
            # or, for ``exact_integers``, handed on (held as written) for the caller to refuse
            # as any other
            held = (read_as_sent if nonfinite else _long_integers_held)(exc.doc) if exact_integers else None
            if held is not None:
                return held
            raise InvalidJSON(_beyond_double(exc.doc, exc.pos)) from exc
        if nonfinite:
            value = read_as_sent(data)
            if value is not None:
                return value
        raise NotJSON(f"invalid JSON: {exc}") from exc
    if type(value) is dict or type(value) is list:
        _refuse_repeated_names(data, value)
    # orjson reads an integer beyond 64 bits as the nearest float: stored, it would be another
    # number. Such a literal is a run of 20 digits, or a minus sign and 19: text without one,
    # nearly all text, costs a table pass and a search in C, not a walk of the value. (``find``,
    # not ``in``: ``in`` first tries the needle as an integer and pays for the error.)
    if len(data) >= 20:
        raw = data if type(data) is bytes else data.encode() if isinstance(data, str) else bytes(data)
        if raw.translate(_DIGITS).find(_RUN) != -1:
            if exact_integers:
                check(value)  # (its depth first: the exact parse recurses)
                return json.loads(raw)  # Python's parser keeps every integer exact
            _refuse_rounded(raw, value)
    return value


def repeated_name(data: bytes | bytearray | memoryview | str) -> str | None:
    """Why :func:`decode` would refuse JSON text for an object naming a member twice, or None
    (text that is not JSON or holds no such object), for a door whose own parser reads the text
    (the MCP transports): the same text is refused there as everywhere else."""
    try:
        value = orjson.loads(data)
    except orjson.JSONDecodeError:  # (refused, or not, by that door's parser)
        return None
    return repeated_name_in(data, value)


def repeated_name_in(data: bytes | bytearray | memoryview | str, value: JSON) -> str | None:
    """:func:`repeated_name` of the text ``data`` that orjson parsed to ``value`` (parsed once
    by a caller that reads the value too)."""
    if type(value) is not dict and type(value) is not list:
        return None
    try:
        _refuse_repeated_names(data, value)
    except NotJSON as exc:
        return exc.message
    except InvalidJSON:  # (refused, or not, by that door's parser)
        return None
    return None


def _refuse_repeated_names(data: bytes | bytearray | memoryview | str, value: JSON) -> None:
    """Refuse an object naming one member twice (RFC 8259: receivers behave unpredictably):
    orjson keeps the last value, and the others would be dropped without a word. Every colon
    outside a string separates one member, so a value that lost a member re-encodes with fewer
    colons than its text has (strings keep theirs; ``\\u003a`` is counted as the colon it
    spells): two counts and an encode in C. More colons in the text — a member lost, or an
    escaped backslash before ``u003a`` — are told apart by the standard library's parse."""
    raw = data.encode() if isinstance(data, str) else bytes(data)
    colons = raw.count(b":")
    if not colons:
        return
    if b"\\u" in raw:
        colons += raw.count(b"\\u003a") + raw.count(b"\\u003A")
    if colons <= encode_trusted(value).count(b":"):
        return

    check(value)  # its depth first: the parse below recurses
    json.loads(raw, object_pairs_hook=_unique_members)


def _unique_members(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object's members as the standard library's parser hands them, refusing a name given
    twice (see :func:`_refuse_repeated_names`)."""
    named: dict[str, Any] = {}
    for name, item in pairs:
        if name in named:
            raise NotJSON(
                f"member name {name!r} is given more than once in one object: which value was "
                "meant is not guessed"
            )
        named[name] = item
    return named


_TOKEN: Final = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{},]')


_NUMBER: Final = re.compile(r"-?[0-9]+(\.[0-9]+)?([eE][-+]?[0-9]+)?")
SHOWN_DIGITS: Final = 40
"""An integer refused for its size is quoted whole up to this many digits, else by its length."""


def _beyond_double(text: str, pos: int) -> str:
    """The refusal of the number literal at ``pos`` in ``text``, which reads as infinity."""
    literal = _NUMBER.match(text, pos)
    number = literal.group() if literal else text[pos : pos + SHOWN_DIGITS]
    at = _too_deep_at(text, before=pos)
    if literal and not literal.group(1) and not literal.group(2):
        return f"{at}: {_integer_words(number, len(number.lstrip('-')))}"
    return _beyond_words(at, number)


def _beyond_words(at: str, number: str) -> str:
    shown = number if len(number) <= SHOWN_DIGITS else number[:SHOWN_DIGITS] + "…"
    return (
        f"{at}: {shown} is not a JSON number this store holds (beyond a double's range: it reads as Infinity)"
    )


class BeyondDouble(float):
    """A number literal past a double's range (``1e400``), held as read for the caller to refuse
    (:func:`check` names it by its literal, as :func:`decode` would): never plain JSON."""

    literal: str

    def __new__(cls, literal: str) -> BeyondDouble:
        held = super().__new__(cls, literal)
        held.literal = literal
        return held


def _long_integers_held(text: str) -> JSON | None:
    """``text`` as Python's parser reads it, with every integer exact — except one too long for
    Python to convert (past ``sys.get_int_max_str_digits()``), held as an integer of as many
    digits (what a refusal says of it: it is refused, never stored) — and every number literal
    past a double's range held as a :class:`BeyondDouble`; None where Python's parser does not
    read it (not JSON, or nested past its recursion limit)."""
    most = sys.get_int_max_str_digits() or math.inf

    def integer(literal: str) -> int:
        digits = len(literal.lstrip("-"))
        if digits < most:
            return int(literal)
        held: int = 10 ** (digits - 1)
        return -held if literal.startswith("-") else held

    def number(literal: str) -> float:
        value = float(literal)
        return value if math.isfinite(value) else BeyondDouble(literal)

    try:
        # (a name given twice refused as in any other text: this parse is the only one it had)
        value: JSON = json.loads(
            text, parse_int=integer, parse_float=number, object_pairs_hook=_unique_members
        )
    except (RecursionError, ValueError):
        return None
    return value


_SURROGATE_ESCAPE: Final = re.compile(r"\\u[dD][89a-fA-F]")


def read_as_sent(data: bytes | bytearray | memoryview | str) -> JSON | None:
    """``data`` as the MCP doors read a message: ``NaN`` and ``Infinity`` tokens as the numbers
    they name, every integer exact, as the SDK's JSON-RPC parser reads them — except a number
    literal past a double's range, which that parser reads as Infinity, held as the
    :class:`BeyondDouble` it was written as, so that its refusal names the literal the caller
    wrote. None where that parser does not read the text either (not JSON, a lone surrogate
    escape); a member named twice in one object is refused (``NotJSON``), as at every door."""
    try:
        text = data if isinstance(data, str) else bytes(data).decode()
    except UnicodeDecodeError:
        return None
    value = _long_integers_held(text)
    if value is None or (_SURROGATE_ESCAPE.search(text) is not None and _holds_lone_surrogate(value)):
        return None
    return value


def _holds_lone_surrogate(value: Any) -> bool:
    if type(value) is str:
        return not utf8_text(value)
    if type(value) is dict:
        return any(not utf8_text(k) or _holds_lone_surrogate(v) for k, v in value.items())
    if type(value) is list:
        return any(_holds_lone_surrogate(v) for v in value)
    return False


def _integer_words(number: str | int, digits: int) -> str:
    """How a refusal names an integer outside the 64-bit range (its literal or value, and how
    many decimal digits it has): whole, or by its length when it is long."""
    if digits <= SHOWN_DIGITS:
        return f"integer {number} is outside the 64-bit range JSON stores"
    negative = number < 0 if type(number) is int else str(number).startswith("-")
    sign = "negative " if negative else ""
    return f"{sign}integer of {digits:,} digits is outside the 64-bit range JSON stores"


def _digits(n: int) -> int:
    """How many decimal digits ``abs(n)`` has, without writing it out (Python refuses to, past
    4,300 digits; and that costs quadratic time)."""
    n = abs(n)
    count = max(1, int(n.bit_length() * 0.30102999566398120) + 1)  # log10(2): right or one over
    return count - 1 if count > 1 and n < 10 ** (count - 1) else count


_STEP_RUN: Final = re.compile(r"(\[\d+\]|\.[^.\[\]]+)\1{7,}")
"""A step of a place repeated eight times or more in a row (``[0][0]…``)."""


def _run_cut(place: str) -> str:
    """``place`` with each long run of one repeated step shown by its first three, an ellipsis,
    its last and the count (``$[0][0][0]…[0] (254 × [0])``): a place hundreds of levels deep
    would otherwise fill a screen with ``[0]``."""

    def cut(run: re.Match[str]) -> str:
        step = run.group(1)
        return f"{step * 3}…{step} ({len(run.group()) // len(step)} × {step})"

    return _STEP_RUN.sub(cut, place)


def _too_deep_at(data: bytes | bytearray | memoryview | str, *, before: int | None = None) -> str:
    """Where the text ``data`` opens its first container deeper than :data:`MAX_DEPTH` (``$``,
    then a step per level, as :func:`check` names a place), found by scanning its brackets:
    the text is too deep to parse. ``before``: where the value at that character offset sits."""
    text = data if isinstance(data, str) else bytes(data).decode("utf-8", "replace")
    steps: list[str] = []  # per open container, the step to the child being read
    objects: list[bool] = []
    indexes: list[int] = []
    key_next = False
    for token in _TOKEN.finditer(text, 0, len(text) if before is None else before):
        t = token.group()
        if t[0] == '"':
            if key_next:
                try:
                    steps[-1] = f".{json.loads(t)}"
                except ValueError:
                    steps[-1] = f".{t[1:-1]}"
                key_next = False
        elif t in "[{":
            if len(objects) >= MAX_DEPTH:
                break
            objects.append(t == "{")
            indexes.append(0)
            steps.append("" if t == "{" else "[0]")
            key_next = t == "{"
        elif t in "]}":
            if objects:
                objects.pop(), indexes.pop(), steps.pop()
            key_next = False
        elif objects:  # a comma: the next member, or the next item
            if objects[-1]:
                key_next = True
            else:
                indexes[-1] += 1
                steps[-1] = f"[{indexes[-1]}]"
    return "$" + "".join(steps)


def decode_trusted(data: bytes | bytearray | memoryview) -> JSON:
    """Parse JSON this store wrote (checked on its way in): no second look at its numbers."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise InvalidJSON(f"invalid JSON: {exc}") from exc


# every ASCII digit and the minus sign read "0", any other byte "." (so one search finds both
# runs; a minus sign between digits elsewhere, as in a date, only costs the exact parse)
_DIGITS: Final = bytes(48 if 48 <= b <= 57 or b == 45 else 46 for b in range(256))
_RUN: Final = b"0" * 20


def _refuse_rounded(raw: bytes | bytearray | memoryview, value: JSON) -> None:
    """Raise what :func:`check` raises of the value ``raw`` says, where orjson rounded one of
    its integers (the run of digits found may as well be inside a string, or in range)."""
    check(value)  # its depth first: the exact parse below recurses
    exact = json.loads(bytes(raw))  # Python's parser keeps every integer exact
    check(exact)


def detach(value: JSON) -> JSON:
    """A copy of ``value`` that shares no object or array with it.

    Readers hand cached objects around; what a caller receives must be its own, or an edit to
    it would change every later read (and the next write would persist it without history).
    The copy costs what the returned value weighs: one encode and decode in C, where a
    recursive Python copy costs several times more for all but the smallest values.
    """
    t = type(value)
    if t is not dict and t is not list:
        return value  # scalars are immutable
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # not plain JSON (a tuple, a huge integer): copy the containers by hand
        return _copy_containers(value)


def _copy_containers(value: Any) -> Any:
    t = type(value)
    if t is dict:
        return {k: _copy_containers(v) for k, v in value.items()}
    if t is list:
        return [_copy_containers(v) for v in value]
    return value


def check(value: JSON, where: str = "$", depth: int = 0) -> None:
    """Raise InvalidJSON unless ``value`` is plain JSON: no NaN/Infinity, string keys only,
    nested no deeper than :data:`MAX_DEPTH` counted from a document's top, where ``value``
    sits ``depth`` levels down."""
    if not _plain(value, depth):
        _explain(value, where, depth)


def checked_copy(value: JSON, where: str = "$", depth: int = 0) -> JSON:
    """:func:`check`, then :func:`detach`: the copy the caller gets, refused as ``check``
    refuses it (the same message, naming the same place). The copy's encoding is the lone
    surrogate test (orjson refuses one): the strings are walked only when it refuses."""
    if not _plain(value, depth, False):
        _explain(value, where, depth)
    t = type(value)
    if t is not dict and t is not list:
        if t is str and not utf8_text(value):
            _explain(value, where, depth)
        return value  # scalars are immutable
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:  # a lone surrogate (named here), else nesting orjson does not encode
        _explain(value, where, depth)
        return _copy_containers(value)


def _plain(node: JSON, depth: int, text: bool = True) -> bool:
    """Whether ``node`` is plain JSON. Every write checks its values: this pass builds no path
    text; ``_explain`` walks again to name the first offending place only when one exists.
    ``text=False`` leaves out the lone surrogate test of strings and keys, for a caller whose
    encoding of the value makes it (:func:`checked_copy`, :func:`encode`)."""
    t = type(node)
    if t is str:
        return not text or utf8_text(node)
    if t is bool or node is None:
        return True
    if t is int:
        return bool(_INT_MIN <= node <= _INT_MAX)
    if t is float:
        return math.isfinite(node)
    if depth >= MAX_DEPTH and (t is dict or t is list):
        return False
    # a container's scalars are answered in its own loop, as the first lines above answer
    # them: a call per number was most of a small write's check
    if t is dict:
        for k, v in node.items():
            if type(k) is not str or (text and not (k.isascii() or _surrogate_in(k) is None)):
                return False
            tv = type(v)
            if tv is str:
                if not text or v.isascii() or _surrogate_in(v) is None:
                    continue
                return False
            if tv is bool or v is None:
                continue
            if tv is int:
                if not _INT_MIN <= v <= _INT_MAX:
                    return False
            elif tv is float:
                if not math.isfinite(v):
                    return False
            elif not _plain(v, depth + 1, text):
                return False
        return True
    if t is list:
        for v in node:
            tv = type(v)
            if tv is str:
                if not text or v.isascii() or _surrogate_in(v) is None:
                    continue
                return False
            if tv is bool or v is None:
                continue
            if tv is int:
                if not _INT_MIN <= v <= _INT_MAX:
                    return False
            elif tv is float:
                if not math.isfinite(v):
                    return False
            elif not _plain(v, depth + 1, text):
                return False
        return True
    return False


def plain_number(value: int | float) -> bool:
    """Whether an ``int`` or ``float`` is a number JSON stores (what :func:`check` asks of one)."""
    if type(value) is int:
        return bool(_INT_MIN <= value <= _INT_MAX)
    return math.isfinite(value)


def _explain(value: JSON, where: str, depth: int = 0) -> None:
    """Raise InvalidJSON naming the first place in ``value``, in document order, that is not
    plain JSON (a key before its value, a container's entries in their order)."""
    # a stack of the containers being walked, each an iterator of its entries still to see:
    # (the entry's key, or _ELEMENT; the container's place; the entry's place; its value)
    stack: list[Iterator[tuple[Any, str, str, JSON]]] = [iter(((_ELEMENT, where, where, value),))]
    depths = [depth]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            depths.pop()
            continue
        key, parent, at, node = entry
        depth = depths[-1]
        if key is not _ELEMENT:
            if type(key) is not str:
                raise InvalidJSON(f"{parent}: object key {key!r} is not a string")
            if not utf8_text(key):
                raise InvalidJSON(f"{parent}: an object key {_lone_surrogate(key)}")
        t = type(node)
        if t is str:
            if not utf8_text(node):
                raise InvalidJSON(f"{at}: a string {_lone_surrogate(node)}")
            continue
        if t is bool or node is None:
            continue
        if depth >= MAX_DEPTH and (t is dict or t is list):
            raise InvalidJSON(
                f"{_run_cut(at)}: nested deeper than {MAX_DEPTH} levels, which JSON storage refuses"
            )
        if t is int:
            if not _INT_MIN <= node <= _INT_MAX:
                raise InvalidJSON(f"{at}: {_integer_words(node, _digits(node))}")
        elif t is float:
            if not math.isfinite(node):
                raise InvalidJSON(f"{at}: {node} is not a JSON number (NaN and Infinity are refused)")
        elif t is BeyondDouble:
            raise InvalidJSON(_beyond_words(at, node.literal))
        elif t is dict:
            stack.append(_members_of(node, at))
            depths.append(depth + 1)
        elif t is list:
            stack.append(_elements_of(node, at))
            depths.append(depth + 1)
        else:
            raise InvalidJSON(f"{at}: {t.__name__} is not a JSON type")


def _members_of(node: dict[Any, JSON], at: str) -> Iterator[tuple[Any, str, str, JSON]]:
    for k, v in node.items():
        yield k, at, f"{at}.{k}", v


def _elements_of(node: list[JSON], at: str) -> Iterator[tuple[Any, str, str, JSON]]:
    for i, v in enumerate(node):
        yield _ELEMENT, at, f"{at}[{i}]", v


_ELEMENT: Final = object()
"""(:func:`_explain`: an entry that is an array's element or the value itself, not an object's member)"""


def _lone_surrogate(text: str) -> str:
    found = _SURROGATE.search(text)
    code = ord(found.group()) if found else 0
    # (the message names the code point: the text itself cannot be written out)
    return f"holding a lone surrogate (\\u{code:04x}) is not Unicode text"


def ascii_digits(text: str) -> bool:
    """Whether ``text`` is one or more ASCII digits: what an index, a count or a cursor is
    written with. (``str.isdigit`` also holds for "²", which ``int`` refuses, and for other
    scripts' digits, which it reads.)"""
    return text.isascii() and text.isdigit()


def kind(value: JSON) -> str:
    """The JSON kind name of a value."""
    t = type(value)
    if t is dict:
        return "object"
    if t is list:
        return "array"
    if t is str:
        return "string"
    if t is bool:
        return "boolean"
    if t is int or t is float:
        return "number"
    if value is None:
        return "null"
    if t is Sparse:  # (an array held along a write's paths only)
        return "array"
    raise InvalidJSON(f"{t.__name__} is not a JSON type")


def json_equal(a: JSON, b: JSON) -> bool:
    """JSON equality: booleans equal only booleans, ``1 == 1.0``, objects by key set and values."""
    ta, tb = type(a), type(b)
    if ta is bool or tb is bool:
        return ta is tb and a == b
    if ta is dict:
        if tb is not dict or len(a) != len(b):
            return False
        return all(k in b and json_equal(v, b[k]) for k, v in a.items())
    if ta is list:
        if tb is not list or len(a) != len(b):
            return False
        return all(json_equal(x, y) for x, y in zip(a, b, strict=True))
    if ta in (int, float):
        return tb in (int, float) and a == b
    return bool(ta is tb and a == b)


def equality_key(value: JSON) -> Hashable:
    """A hashable form of ``value``, equal for two values exactly when :func:`json_equal` says
    they are: values are matched against many others by one set lookup each, not compared
    pairwise."""
    kind = type(value)
    if kind is dict:
        return (1, tuple(sorted((k, equality_key(v)) for k, v in value.items())))
    if kind is list:
        return (0, tuple(equality_key(v) for v in value))
    if kind is bool:
        return (2, value)  # (True == 1 in Python; JSON keeps them apart)
    scalar: Hashable = value  # (a number: 1 == 1.0 and their hashes agree; a string; null)
    return scalar


def identical(a: JSON, b: JSON) -> bool:
    """Exact identity of two JSON values: same kinds, same number types, same key sets.

    Stricter than :func:`json_equal` (``1`` and ``1.0`` differ) so that a diff reconstructs
    the new document byte for byte.
    """
    if a is b:
        return True
    ta = type(a)
    if ta is not type(b):
        return False
    if ta is dict:
        return len(a) == len(b) and all(k in b and identical(v, b[k]) for k, v in a.items())
    if ta is list:
        return len(a) == len(b) and all(identical(x, y) for x, y in zip(a, b, strict=True))
    return bool(a == b)


def text_length(value: str) -> int:
    """Length of a string as Unicode code points (Python's ``len``), our documented unit."""
    return len(value)


def json_contains(value: JSON, pattern: JSON) -> bool:
    """Containment with PostgreSQL ``jsonb @>`` semantics below the top level.

    Objects: every pattern key is present and its value contained. Arrays: every pattern
    element is contained in some element (order and extras ignored). Scalars: JSON equality.

    One call per level of both (plain loops: a generator expression costs two more frames
    a level, and a filter within the 254 levels a document may nest ran out of them): the
    walk stops where ``value`` does, so a stored document bounds it to 255 calls.
    """
    tp = type(pattern)
    if tp is dict:
        if type(value) is not dict:
            return False
        for k, v in pattern.items():  # noqa: SIM110 (all() over a generator: two frames a level)
            if k not in value or not json_contains(value[k], v):
                return False
        return True
    if tp is list:
        if type(value) is not list:
            return False
        if len(pattern) * len(value) > PAIRWISE_MAX:
            return _array_contains(value, pattern)
        for p in pattern:
            for x in value:
                if json_contains(x, p):
                    break
            else:
                return False
        return True
    if type(value) in (dict, list):
        return False
    return json_equal(value, pattern)


PAIRWISE_MAX = 256
"""Above this many (pattern element, array element) pairs, :func:`json_contains` of arrays looks
scalars up by their equality keys instead of comparing every pair (a pattern repeating one
element a million times cost a million comparisons per array element)."""


def _array_contains(value: list[JSON], pattern: list[JSON]) -> bool:
    """Every element of ``pattern`` contained in some element of ``value`` (see
    :func:`json_contains`), with each distinct pattern element tried once: a scalar by one set
    lookup among the array's scalars, an object or array against the array's elements of its
    kind that hold its rarest scalar, at its path (:func:`_holding`) — all of them only when it
    has none: compared with every element, a pattern of a few hundred objects took minutes against
    an array of a few hundred thousand."""
    scalars: set[Hashable] | None = None
    holding: dict[type, dict[Hashable, list[JSON]]] = {}
    seen: set[Hashable] = set()
    for p in pattern:
        key = equality_key(p)
        if key in seen:
            continue
        seen.add(key)
        kind = type(p)
        if kind is dict or kind is list:
            index = holding.get(kind)
            if index is None:
                index = holding[kind] = _holding(value, kind)
            for x in _candidates(value, kind, index, p):
                if json_contains(x, p):
                    break
            else:
                return False
        else:
            if scalars is None:
                scalars = {equality_key(x) for x in value if type(x) is not dict and type(x) is not list}
            if key not in scalars:
                return False
    return True


_PARTS_DEPTH: Final = 4
"""How deep below an array's element :func:`_scalar_parts` indexes its scalars."""


def _scalar_parts(node: JSON) -> Iterator[Hashable]:
    """The scalars in ``node`` (to :data:`_PARTS_DEPTH` levels), each with its path — member
    names, and ``0`` for "some element of an array": a container that contains ``node`` holds
    each of them (containment keeps every path and every scalar), so they index candidates."""
    stack: list[tuple[tuple[str | int, ...], JSON]] = [((), node)]
    while stack:
        path, item = stack.pop()
        members = item.items() if type(item) is dict else ((0, v) for v in item)
        for step, v in members:
            if type(v) is not dict and type(v) is not list:
                yield ((*path, step), equality_key(v))
            elif len(path) + 1 < _PARTS_DEPTH:
                stack.append(((*path, step), v))


def _holding(value: list[JSON], kind: type) -> dict[Hashable, list[JSON]]:
    """The elements of ``value`` of ``kind`` (object or array) by each of their scalar parts."""
    index: dict[Hashable, list[JSON]] = {}
    for x in value:
        if type(x) is kind:
            for part in set(_scalar_parts(x)):
                index.setdefault(part, []).append(x)
    return index


def _candidates(
    value: list[JSON], kind: type, index: dict[Hashable, list[JSON]], pattern: dict[str, JSON] | list[JSON]
) -> list[JSON]:
    """The elements of ``value`` that may contain ``pattern``: those holding its rarest scalar
    part, or every element of its kind when it has none (within :data:`_PARTS_DEPTH`)."""
    best: list[JSON] | None = None
    for part in _scalar_parts(pattern):
        found = index.get(part, [])
        if best is None or len(found) < len(best):
            best = found
            if not best:
                break
    return [x for x in value if type(x) is kind] if best is None else best
