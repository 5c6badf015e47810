"""Agent memory in the studio: agents → their global, cwd and session scopes → planes.

A scope page reads the hot planes and only the outline of each lazy plane; a lazy node's
children load when it is opened. The timeline is a page of changes with offsets ``[n]`` (the
scope ``n`` transitions ago) and each change's patch (``patches[n]``), and the context page
shows the exact text a model is given at the start of a turn.
"""

from __future__ import annotations

from typing import Any, Final

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from stateflow.doc.diff import to_patch
from stateflow.doc.select import MISSING
from stateflow.errors import InvalidInput, NotFound
from stateflow.memory import MemoryConfig, MemoryView
from stateflow.memory.planes import RUNTIME, PlaneSet
from stateflow.memory.scopes import MEMORY_STATE, SCOPES, Identity
from stateflow.memory.view import MODES
from stateflow.store import DocKey
from stateflow.studio.session import Session
from stateflow.studio.tree import MAX_CHILDREN, lazy_node
from stateflow.studio.web import PREFIX, Pages, Studio, int_param, json_field, page, url
from stateflow.subjects import Subject, encode_subject

AGENTS_PAGE: Final = 50
SCOPES_PAGE: Final = 200
HISTORY_PAGE: Final = 20
PICK_MAX: Final = 1000
"""The most working directories (or sessions) the context form lists; an agent with more gets
a text field to type the key in."""
PLANES: Final = PlaneSet()
KNOWN: Final = frozenset({*PLANES.names, RUNTIME})
EXTRA_INLINE_BYTES: Final = 64 * 1024
"""An extra plane (a root the built-in plane set does not name, declared by the program that
writes the scope) up to this size is shown whole with the hot planes; a larger one is browsed
like a lazy plane, one level at a time."""


def _extra_planes(store: Any, doc_key: DocKey) -> tuple[list[str], list[str]]:
    """The scope's extra planes: (small enough to show whole, to browse lazily)."""
    sizes = store.member_sizes(doc_key)
    extra = [name for name in sizes if name not in KNOWN]
    small = [name for name in extra if sizes[name] <= EXTRA_INLINE_BYTES]
    return small, [name for name in extra if name not in small]


def _prefix(agent: str) -> str:
    """Every encoded subject of ``agent`` starts with this (subjects sort by target first)."""
    return orjson.dumps(["agent", agent]).decode()[:-1] + ","


def _past(agent: str) -> str:
    """Sorts after every subject of ``agent`` and before the next agent's: after the prefix's
    comma comes a quote (0x22); ``#`` is 0x23."""
    return _prefix(agent) + "#"


AGENTS_FROM: Final = '["agent",'
AGENTS_END: Final = '["agent"-'
"""Every agent's subjects sort after ``AGENTS_FROM`` and before ``AGENTS_END`` (``-`` follows
the prefix's comma); the memory state's other targets (tools, which the operator's door may
write) sort after it and are no agent's memory."""


def _agent(request: Request, session: Session) -> str:
    """The page's agent: a query parameter, so that any name (a '/', '?', '#' or '%' in it)
    travels percent-encoded and reaches its page."""
    agent = request.query_params.get("agent")
    if not agent:
        raise InvalidInput("a memory page is named by its agent (agent=…)")
    if not session.token.allows_tenant(("agent", agent)):
        raise NotFound(f"no agent {agent!r} for this token")
    return agent


def agents(studio: Studio, request: Request, session: Session) -> Response:
    """Agents with memory, one index probe each (the scan jumps over an agent's scopes)."""
    store, targets = studio.store, session.token.targets
    after = request.query_params.get("after") or None
    found: list[str] = []
    more = False
    if targets is not None:
        names = sorted(n for k, n in targets if k == "agent" and (after is None or n > after))
        for n in names:
            if store.scan(MEMORY_STATE, after=_prefix(n), limit=1) and _owned(store, n):
                if len(found) == AGENTS_PAGE:
                    more = True
                    break
                found.append(n)
    else:
        cursor = _past(after) if after else AGENTS_FROM
        while True:
            listed = store.scan(MEMORY_STATE, after=cursor, limit=1)
            if not listed:
                break
            subject = Subject.decode(listed[0].key.subject)
            if subject.target_kind != "agent":  # past the agents' range: the end of the list
                break
            if len(found) == AGENTS_PAGE:
                more = True
                break
            found.append(subject.target_name)
            cursor = _past(subject.target_name)
    # memory records of other targets are listed with the memory state's records (one probe)
    others = targets is None and bool(store.scan(MEMORY_STATE, after=AGENTS_END, limit=1))
    return studio.html(
        "memory.html",
        session=session,
        nav="memory",
        agents=found,
        next_after=found[-1] if more else None,
        pages=Pages.at(after, request.query_params.get("back")),
        others=others,
    )


def _owned(store: Any, agent: str) -> bool:
    first = store.scan(MEMORY_STATE, after=_prefix(agent), limit=1)
    return bool(first) and first[0].key.subject.startswith(_prefix(agent))


def _kind_prefix(agent: str, kind: str) -> str:
    """Every encoded subject of ``agent``'s ``kind`` scopes starts with this."""
    return orjson.dumps(["agent", agent, kind]).decode()[:-1] + ","


def agent_page(studio: Studio, request: Request, session: Session) -> Response:
    agent = _agent(request, session)
    store = studio.store
    after = request.query_params.get("after") or None
    rows: list[dict[str, Any]] = []
    cursor: str | None = after or _prefix(agent)
    more = False
    while cursor is not None and not more:
        listed = store.scan(MEMORY_STATE, after=cursor, limit=SCOPES_PAGE)
        cursor = None
        for item in listed:
            if not item.key.subject.startswith(_prefix(agent)):
                break
            if len(rows) == SCOPES_PAGE:
                more = True
                break
            s = Subject.decode(item.key.subject)
            rows.append(
                {
                    "kind": s.kind,
                    "key": s.key,
                    "revision": item.revision,
                    "at": item.at,
                    "enc": item.key.subject,
                }
            )
        else:
            if len(listed) == SCOPES_PAGE:
                cursor = listed[-1].key.subject
    if not rows and not after:
        raise NotFound(f"agent {agent!r} has no memory")
    by_kind = {k: [r for r in rows if r["kind"] == k] for k in SCOPES}
    # A page holds a run of the agent's scopes in subject order (kinds one after another): a
    # kind's count is its total only where the page holds its whole run, and a kind with none
    # here may have them on another page.
    counts: dict[str, dict[str, Any]] = {}
    for kind in SCOPES:
        prefix = _kind_prefix(agent, kind)
        whole = (after is None or after < prefix) and (
            not more or (rows[-1]["enc"] > prefix and not rows[-1]["enc"].startswith(prefix))
        )
        elsewhere = None
        if not whole and not by_kind[kind]:
            first = store.scan(MEMORY_STATE, within=prefix, limit=1)
            if first:
                elsewhere = "earlier" if after is not None and first[0].key.subject <= after else "later"
        counts[kind] = {"whole": whole, "elsewhere": elsewhere}
    return studio.html(
        "agent.html",
        session=session,
        nav="memory",
        agent=agent,
        scopes=by_kind,
        counts=counts,
        picks={kind: _pick(store, agent, kind) for kind in ("cwd", "session")},
        modes=MODES,
        next_after=rows[-1]["enc"] if more else None,
        pages=Pages.at(after, request.query_params.get("back")),
    )


def _pick(store: Any, agent: str, kind: str) -> list[str] | None:
    """The keys the context form offers for ``kind``, whatever page the list is on: all of them
    up to :data:`PICK_MAX` (None past it: the form takes a typed key instead)."""
    listed = store.scan(MEMORY_STATE, within=_kind_prefix(agent, kind), limit=PICK_MAX + 1)
    if len(listed) > PICK_MAX:
        return None
    return [Subject.decode(item.key.subject).key for item in listed]


def _scope_key(agent: str, scope: str, key: str) -> DocKey:
    if scope not in SCOPES:
        raise InvalidInput(f"scope must be one of {', '.join(SCOPES)}")
    if not key:
        raise InvalidInput("a scope page needs its key")
    return DocKey(MEMORY_STATE, encode_subject("agent", agent, scope, key))


def scope_page(studio: Studio, request: Request, session: Session) -> Response:
    agent = _agent(request, session)
    q = request.query_params
    scope, key = q.get("scope", ""), q.get("key", "")
    doc_key = _scope_key(agent, scope, key)
    store = studio.store
    hot = [*PLANES.hot, RUNTIME]
    small, big = _extra_planes(store, doc_key)
    doc = store.get(doc_key, [*hot, *small], outlines=[*PLANES.lazy, *big])
    if doc.revision == 0:
        raise NotFound(f"agent {agent!r} has no {scope} scope {key!r}")
    start = int_param(q, "start") or 0
    before = int_param(q, "before")
    changes = store.history([doc_key], limit=HISTORY_PAGE + 1, before_seq=before, members=hot)
    timeline = []
    for i, change in enumerate(changes[:HISTORY_PAGE]):
        timeline.append(
            {
                "offset": start + i,
                "seq": change.seq,
                "at": change.at,
                "revision": change.revision,
                "origin": change.origin,
                "patch": to_patch(change.edits) if change.edits else {},
                "lazy_paths": [p for p in change.paths if p and p[0] in PLANES.lazy],
            }
        )
    more = len(changes) > HISTORY_PAGE
    offset = int_param(q, "offset")
    asof = None
    if offset:
        revision = doc.revision - offset
        if revision < 0:
            raise NotFound(f"offset [{offset}] is before this scope's first transition")
        body = store.read_at(doc_key, revision=revision, members=hot).body
        asof = {"offset": offset, "revision": revision, "value": MISSING if body is None else body}
    planes = {name: doc.body[name] for name in hot if doc.body and name in doc.body}
    extra = {name: doc.body[name] for name in small if doc.body and name in doc.body}
    lazy = {name: outline for name, outline in doc.outlines.items() if outline is not None}
    # a large extra plane that is not an object has no outline: browsed from its root
    unoutlined = [name for name in big if doc.outlines.get(name) is None]
    return studio.html(
        "scope.html",
        session=session,
        nav="memory",
        agent=agent,
        scope=scope,
        key=key,
        doc=doc,
        planes=planes,
        runtime=planes.pop(RUNTIME, None),
        extra=extra,
        lazy={n: _outline_rows(o) for n, o in lazy.items()},
        extra_lazy=set(big),
        unoutlined=unoutlined,
        timeline=timeline,
        next_page={"start": start + HISTORY_PAGE, "before": changes[HISTORY_PAGE - 1].seq} if more else None,
        # the timeline's page, which every link of the page keeps (an offset's, the as-of's close)
        at_page={"start": start or None, "before": before, "back": q.get("back")},
        pages=Pages.at(None if before is None else str(before), q.get("back")),
        newer_start=max(0, start - HISTORY_PAGE),
        asof=asof,
    )


def _outline_rows(outline: dict[str, str]) -> dict[str, Any]:
    items = list(outline.items())
    return {"items": items[:MAX_CHILDREN], "more": max(0, len(items) - MAX_CHILDREN), "total": len(items)}


def lazy_children(studio: Studio, request: Request, session: Session) -> Response:
    """The children of one lazy node (an htmx fragment), a page at a time."""
    agent = _agent(request, session)
    q = request.query_params
    doc_key = _scope_key(agent, q.get("scope", ""), q.get("key", ""))
    plane = q.get("plane", "lazy")
    if plane not in PLANES.lazy and plane not in _extra_planes(studio.store, doc_key)[1]:
        raise InvalidInput(f"{plane!r} is not a lazy plane (nor a large extra one) of this scope")
    path = json_field(q.get("path") or "[]", "path")
    if not isinstance(path, list) or not all(isinstance(s, str) or (type(s) is int and s >= 0) for s in path):
        raise InvalidInput("path must be a JSON array of keys and non-negative indices")
    start = int_param(q, "start") or 0
    # the store reads the nodes down to this page of children (and one node per child that
    # is a subtree, for its kind and size): never the plane, never a grandchild's subtree
    listed = studio.store.children(doc_key, (plane, *path), start=start, limit=MAX_CHILDREN)
    if listed is None:
        raise NotFound("that lazy node no longer exists")
    shown = listed.items
    q_scope, q_key = q.get("scope"), q.get("key")

    def href(at_path: list[Any], **more: Any) -> str:
        return url(
            "/memory/lazy",
            agent=agent,
            scope=q_scope,
            key=q_key,
            plane=plane,
            path=_path_text(at_path),
            **more,
        )

    nodes = [
        lazy_node(
            k,
            child_kind,
            href([*path, k]) if child_kind in ("object", "array") else "",
            size=size,
            value=MISSING if child_kind in ("object", "array") else v,
        )
        for k, child_kind, size, v in shown
    ]
    left = listed.size - start - len(shown)
    return studio.html(
        "_lazy_children.html",
        session=session,
        nodes=nodes,
        more_href=href(path, start=start + len(shown)) if left > 0 else None,
        left=left,
    )


def _path_text(path: list[Any]) -> str:
    return orjson.dumps(path).decode()


def context_page(studio: Studio, request: Request, session: Session) -> Response:
    agent = _agent(request, session)
    q = request.query_params
    cwd, sid, mode = q.get("cwd") or "/", q.get("session") or "default", q.get("mode") or "active"
    identity = Identity(agent, cwd, sid)  # the stored keys as they are: no path resolution here
    view = MemoryView(studio.store, identity, SCOPES, MemoryConfig(mode=mode))
    context = view.context()
    return studio.html(
        "context.html",
        session=session,
        nav="memory",
        agent=agent,
        cwd=cwd,
        sid=sid,
        mode=mode,
        modes=MODES,
        context=context,
        text=context.text(),
    )


def register(app: FastAPI, studio: Studio) -> None:
    for path, fn in {
        "/memory": agents,
        "/memory/agent": agent_page,
        "/memory/scope": scope_page,
        "/memory/lazy": lazy_children,
        "/memory/context": context_page,
    }.items():
        app.add_api_route(PREFIX + path, page(studio, fn), methods=["GET"], include_in_schema=False)
