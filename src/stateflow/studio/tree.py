"""HTML for JSON values: a collapsible tree (native ``<details>``, no script needed), the rows
of a diff, and the children of a lazy node. Every string is escaped here."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from markupsafe import Markup, escape

from stateflow.doc.canonical import JSON, encode, kind
from stateflow.doc.diff import Edit
from stateflow.doc.select import MISSING

MAX_CHILDREN: Final = 200
"""Children shown per object or array; the rest are counted, not rendered."""
MAX_NODES: Final = 4000
"""Nodes rendered per tree: a huge document is cut, never sent whole."""
MAX_TEXT: Final = 400
MAX_DIFF_ROWS: Final = 500
"""Changed paths a compare shows (its rows also share one budget of :data:`MAX_NODES`): two
very different revisions are compared in a page, the rest of their changes counted."""
DIFF_TREE_NODES: Final = 400


HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u115f\u1160\u180e\u200b\u200e\u200f"
    "\u2028-\u202e\u2060-\u2064\u2066-\u2069\u3164\ufeff\ufff9-\ufffb]"
)
"""Characters a page must not draw as they are: controls (tab and newline aside: white space),
bidirectional controls — an override inside a value would reverse the characters after it,
its closing quote and key included — and characters that take no space. Joiners (ZWJ, ZWNJ)
are left: scripts and emoji sequences need them."""


def _escape_code(match: re.Match[str]) -> str:
    return f"\\u{ord(match[0]):04x}"


def visible(text: Any, mark: bool = True) -> Markup:
    """``text`` for a page, escaped, each :data:`HIDDEN` character shown as its ``\\u202e``
    escape: marked (``<span class="esc">``, told apart from those six characters typed) unless
    ``mark`` is false, for text that cannot hold markup (a page title). Every key, value and
    name from a record goes through here (the ``visible`` filter in the templates)."""
    text = str(text)
    if not mark:
        return escape(HIDDEN.sub(_escape_code, text))
    out: list[str] = []
    last = 0
    for found in HIDDEN.finditer(text):
        code = ord(found[0])
        out.append(escape(text[last : found.start()]))
        out.append(Markup(f'<span class="esc" title="U+{code:04X}">\\u{code:04x}</span>'))
        last = found.end()
    out.append(escape(text[last:]))
    return Markup("").join(out)


def json_text(text: str) -> str:
    """JSON text with each :data:`HIDDEN` character inside its strings written as its ``\\u``
    escape (the same JSON value): an editor shows the escape, not a reordered line. (Outside
    strings JSON text holds none of them: its white space is tab, newline, return and space,
    and a return is escaped in a string.)"""
    return HIDDEN.sub(_escape_code, text)


def path_text(path: Sequence[str | int]) -> str:
    """``a.b[2]["odd key"]``: how the studio names a place in a document (a key longer than
    :data:`MAX_TEXT` cut, as a tree cuts it)."""
    out = ""
    for seg in path:
        if isinstance(seg, str) and len(seg) > MAX_TEXT:
            seg = seg[:MAX_TEXT] + "…"
        if isinstance(seg, int):
            out += f"[{seg}]"
        elif seg.isidentifier():
            out += f".{seg}" if out else seg
        else:
            out += "[" + encode(seg).decode() + "]"
    return out or "(whole document)"


ORIGIN_FIELDS: Final = {
    "actor": "actor",
    "consumer": "consumer",
    "tool": "tool",
    "op_id": "op id",
    "run_id": "run",
    "turn_id": "turn",
    "inbound_id": "inbound id",
}
"""An origin's fields as a timeline row names them, in the order people look for them (the
door comes first on its own line, ``meta`` last as a tree)."""


def origin_fields(origin: dict[str, Any]) -> list[tuple[str, Any]]:
    """(label, value) for every field ``origin`` sets besides its door and meta: the known
    ones in order, then any other a writer recorded — nothing an origin says is dropped."""
    known = [(label, origin[k]) for k, label in ORIGIN_FIELDS.items() if origin.get(k) is not None]
    other = sorted(k for k in origin if k not in ORIGIN_FIELDS and k not in ("door", "meta"))
    return known + [(k.replace("_", " "), origin[k]) for k in other if origin[k] is not None]


def scalar(value: JSON) -> Markup:
    """One scalar (or a short inline rendering of a container), classed by its JSON kind."""
    k = kind(value)
    if k == "object":
        return Markup('<span class="j-meta">{%s}</span>') % _count(len(value), "key")
    if k == "array":
        return Markup('<span class="j-meta">[%s]</span>') % _count(len(value), "item")
    text = encode(value).decode()
    if len(text) > MAX_TEXT:
        return Markup('<span class="j-%s" title="%s characters">%s…</span>') % (
            k,
            len(text),
            visible(text[:MAX_TEXT]),
        )
    return Markup('<span class="j-%s">%s</span>') % (k, visible(text))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


class _Budget:
    def __init__(self, nodes: int) -> None:
        self.left = nodes


def tree(value: JSON, *, open_depth: int = 2, max_nodes: int = MAX_NODES) -> Markup:
    """A collapsible tree of ``value``: containers down to ``open_depth`` start open."""
    return _tree(value, open_depth, max_nodes)[0]


def _tree(value: JSON, open_depth: int, max_nodes: int) -> tuple[Markup, int]:
    """The tree and the nodes it rendered."""
    if value is MISSING:
        return Markup('<p class="muted">(no document)</p>'), 0
    budget = _Budget(max_nodes)
    body = _node(None, value, 0, open_depth, budget)
    cut = (
        Markup("")
        if budget.left >= 0
        else Markup('<p class="muted">The tree was cut to keep the page fast.</p>')
    )
    return Markup('<ul class="tree">%s</ul>%s') % (body, cut), min(max_nodes, max_nodes - budget.left)


def _label(key: str | int | None) -> Markup:
    if key is None:
        return Markup("")
    if isinstance(key, int):
        return Markup('<span class="j-index">%s</span>') % key
    if len(key) > MAX_TEXT:  # cut as a value is: a huge key is not sent whole either
        return Markup('<span class="j-key" title="%s characters">%s…</span>') % (
            len(key),
            visible(key[:MAX_TEXT]),
        )
    return Markup('<span class="j-key">%s</span>') % visible(key)


def _node(key: str | int | None, value: JSON, depth: int, open_depth: int, budget: _Budget) -> Markup:
    budget.left -= 1
    if budget.left < 0:
        return Markup("")
    k = kind(value)
    if k not in ("object", "array"):
        return Markup('<li class="leaf">%s%s</li>') % (_label(key), scalar(value))
    items: list[tuple[str | int, Any]] = list(value.items()) if k == "object" else list(enumerate(value))
    if not items:
        return Markup('<li class="leaf">%s<span class="j-meta">%s</span></li>') % (
            _label(key),
            "{}" if k == "object" else "[]",
        )
    children = [_node(ck, cv, depth + 1, open_depth, budget) for ck, cv in items[:MAX_CHILDREN]]
    if len(items) > MAX_CHILDREN:
        children.append(Markup('<li class="muted">… %s more</li>') % (len(items) - MAX_CHILDREN))
    return Markup("<li><details%s><summary>%s%s</summary><ul>%s</ul></details></li>") % (
        Markup(" open") if depth < open_depth else Markup(""),
        _label(key),
        scalar(value),
        Markup("").join(children),
    )


def at(value: JSON, path: Sequence[str | int]) -> JSON:
    """The value at ``path``, or :data:`MISSING`."""
    node = value
    for seg in path:
        if isinstance(seg, int):
            if type(node) is not list or seg >= len(node):
                return MISSING
        elif type(node) is not dict or seg not in node:
            return MISSING
        node = node[seg]
    return node


def diff_rows(old: JSON, edits: Sequence[Edit]) -> tuple[list[dict[str, Any]], int]:
    """Per edit: the path, the value before and the value after (``None`` markup when absent);
    and how many edits were left out. A compare is cut like a huge tree: at most
    :data:`MAX_DIFF_ROWS` rows, whose values share :data:`MAX_NODES` nodes."""
    rows: list[dict[str, Any]] = []
    left = MAX_NODES
    for edit in edits:
        if len(rows) == MAX_DIFF_ROWS or left <= 0:
            break
        sides: list[Markup | None] = []
        for value in (at(old, edit.path), MISSING if edit.is_delete else edit.value):
            if value is MISSING:
                sides.append(None)
                continue
            shown, used = _tree(value, 1, min(DIFF_TREE_NODES, max(left, 1)))
            left -= used
            sides.append(shown)
        rows.append({"path": path_text(edit.path), "before": sides[0], "after": sides[1]})
    return rows, len(edits) - len(rows)


def lazy_node(
    key: str | int, node_kind: str, href: str, *, size: int | None = None, value: JSON = MISSING
) -> Markup:
    """One node of a lazy tree: a container loads its children from ``href`` when opened until
    a load succeeds (htmx; static/studio.js skips the request when it is closed or loaded, and
    so retries one that got no answer); a scalar shows its value when known, else its kind."""
    label = _label(key)
    if node_kind in ("object", "array"):
        if size is None:
            meta = "{…}" if node_kind == "object" else "[…]"
        elif node_kind == "object":
            meta = "{" + _count(size, "key") + "}"
        else:
            meta = "[" + _count(size, "item") + "]"
        return Markup(
            '<li class="lazy-node"><details class="lazy-load" hx-get="%s" hx-trigger="toggle" hx-target="find ul" '
            'hx-swap="innerHTML"><summary>%s<span class="j-meta">%s</span></summary>'
            '<ul><li class="muted loading">loading…</li></ul></details></li>'
        ) % (href, label, meta)
    shown = scalar(value) if value is not MISSING else Markup('<span class="j-meta">%s</span>') % node_kind
    return Markup('<li class="leaf">%s%s</li>') % (label, shown)
