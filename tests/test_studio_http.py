"""The studio over HTTP, without a browser: sign-in, cookies, CSRF, read-only and tenant-limited
tokens, refusals that write nothing, and the offline ``/docs`` — on both backends."""

from __future__ import annotations

import html
import os
import re
import socket
import subprocess
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import orjson
import pytest
from fastapi.testclient import TestClient

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.memory import ExtraRoot, Identity, MemoryConfig, MemoryView
from stateflow.states import DoorContext, StatesService
from stateflow.store import SqlStore

from .studio_seed import seeded_store, ticket

ADMIN = "studio-admin-token-0001"
READER = "studio-reader-token-001"
BILLING = "studio-billing-token-01"
RECORD = "/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1001"
SUBJECT = {"tk": "agent", "tn": "triage", "kind": "ticket", "key": "T-1001"}
EDITED = {"tk": "agent", "tn": "triage", "kind": "ticket", "key": "T-1004"}


@pytest.fixture(scope="module", params=["sqlite", "postgres"])
def backend_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[SqlStore, StatesService]]:
    with seeded_store(request.param, tmp_path_factory.mktemp("studio")) as pair:
        yield pair


@pytest.fixture
def seeded(backend_store: tuple[SqlStore, StatesService]) -> Iterator[tuple[TestClient, StatesService]]:
    """A fresh client (no cookies) on the module's seeded store."""
    _, service = backend_store
    tokens = TokenSet(
        [parse_token(ADMIN), parse_token(READER + ":read"), parse_token(BILLING + "@agent/billing")]
    )
    with TestClient(create_app(service, tokens), base_url="http://127.0.0.1") as client:
        yield client, service


def sign_in(client: Any, token: str) -> Any:  # the test client's response type (httpx or httpx2)
    form = client.get("/studio/login")
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
    assert nonce is not None
    return client.post("/studio/login", data={"token": token, "login_csrf": nonce[1]}, follow_redirects=False)


def csrf_of(html: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', html)
    assert found is not None
    return found[1]


def test_pages_need_a_session_and_sign_in_sets_an_http_only_strict_cookie(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, _ = seeded
    r = client.get("/studio/states", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"].startswith("/studio/login")
    r = client.get("/studio/memory", headers={"HX-Request": "true"}, follow_redirects=False)
    assert r.headers["HX-Redirect"].startswith("/studio/login")

    # an unknown token, and a sign-in form posted without its own nonce, are refused
    r = sign_in(client, "this-token-is-not-configured")
    assert r.status_code == 403 and "not one this server accepts" in r.text
    r = client.post("/studio/login", data={"token": ADMIN, "login_csrf": "forged"}, follow_redirects=False)
    assert r.status_code == 403 and "stateflow_studio=" not in r.headers.get("set-cookie", "")

    r = sign_in(client, ADMIN)
    assert r.status_code == 303 and r.headers["location"] == "/studio/states"
    cookie = next(c for c in r.headers.get_list("set-cookie") if c.startswith("stateflow_studio="))
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie and "Path=/studio" in cookie
    assert ADMIN not in cookie
    assert client.get("/studio/states").status_code == 200
    # the session cookie is not an API credential
    assert client.get("/api/states").status_code == 401


def test_a_refused_sign_in_is_403_with_the_form_kept(seeded: tuple[TestClient, StatesService]) -> None:
    """A 401 must carry a WWW-Authenticate challenge naming a scheme the URL accepts; the
    sign-in form takes its token in the form, so a refused one is 403 (given and refused)."""
    client, _ = seeded
    for token in ("this-token-is-not-configured", ""):
        r = sign_in(client, token)
        assert r.status_code == 403 and "www-authenticate" not in r.headers, r.headers
        assert "not one this server accepts" in r.text and 'name="token"' in r.text
        kept = re.search(r'name="login_csrf" value="([^"]+)"', r.text)
        assert kept is not None and kept[1] == client.cookies.get("stateflow_studio_login")
        assert "stateflow_studio=" not in r.headers.get("set-cookie", "")
    assert client.get("/studio/states", follow_redirects=False).status_code == 303  # not signed in
    r = client.get("/api/states")  # the API's 401 still challenges
    assert r.status_code == 401 and r.headers["www-authenticate"] == 'Bearer realm="stateflow"'


def test_sign_in_forms_open_in_several_tabs_all_work(seeded: tuple[TestClient, StatesService]) -> None:
    """Each showing of the sign-in form replaced the browser's one nonce: the first of two tabs
    then failed with "the sign-in form expired", and its failure expired the second's form."""
    client, _ = seeded

    def form() -> str:
        page = client.get("/studio/login")
        nonce = re.search(r'name="login_csrf" value="([^"]+)"', page.text)
        assert nonce is not None
        return nonce[1]

    first, second = form(), form()
    r = client.post(
        "/studio/login", data={"token": "not-one-we-know", "login_csrf": first}, follow_redirects=False
    )
    assert r.status_code == 403 and "not one this server accepts" in r.text
    r = client.post("/studio/login", data={"token": ADMIN, "login_csrf": second}, follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/studio/states"
    # a third tab opened before signing in still signs in (another token, say)
    r = client.post("/studio/login", data={"token": READER, "login_csrf": first}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/studio/states").text.count("read-only") >= 1


def test_edit_checks_csrf_and_schema_and_writes_only_valid_documents(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, service = seeded
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params=EDITED)
    assert page.status_code == 200 and 'id="edit"' in page.text
    before = service.read("tickets", ticket("T-1004"))
    assert before is not None

    at = str(before["revision"])
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**EDITED, "revision": at, "document": "{}", "csrf": "forged"},
    )
    assert r.status_code == 403 and "csrf" in r.text
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **EDITED,
            "revision": at,
            "document": '{"title": "x", "status": "lost"}',
            "csrf": csrf_of(page.text),
        },
    )
    assert r.status_code == 422
    assert 'id="edit-error"' in r.text and "lost" in r.text
    # a refused value's bidi control is shown as its marked escape, not drawn (it reversed the
    # rest of the message)
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **EDITED,
            "revision": at,
            "document": '{"title": "x", "status": "\\u202elost"}',
            "csrf": csrf_of(page.text),
        },
    )
    alert = re.search(r'id="edit-error">(.*?)</div>', r.text, re.S)
    assert r.status_code == 422 and alert is not None
    assert "\u202e" not in alert[1] and '<span class="esc" title="U+202E">\\u202e</span>lost' in alert[1]
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**EDITED, "revision": at, "document": "{not json", "csrf": csrf_of(page.text)},
    )
    assert r.status_code == 422 and "not valid JSON" in r.text
    assert service.read("tickets", ticket("T-1004")) == before  # nothing written

    data = dict(before["data"], status="closed")
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**EDITED, "revision": at, "document": orjson.dumps(data).decode(), "csrf": csrf_of(page.text)},
        follow_redirects=False,
    )
    assert r.status_code == 303
    after = service.read("tickets", ticket("T-1004"))
    assert after is not None and after["data"]["status"] == "closed"
    assert after["revision"] == before["revision"] + 1
    trail = service.writes("tickets", ticket("T-1004"), limit=1)["items"][0]
    assert trail["origin"]["door"] == "studio" and trail["origin"]["actor"] == parse_token(ADMIN).principal


def test_an_edit_of_a_record_changed_meanwhile_is_refused_with_the_current_revision(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """The edit form carries the revision it showed; a change made meanwhile (here through the
    service, as another program would) makes the edit a conflict: nothing is saved, the person
    is told why, and their text is kept."""
    client, service = seeded
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params=EDITED)
    shown = int(re.search(r'name="revision" value="(\d+)"', page.text)[1])  # type: ignore[index]
    current = service.read("tickets", ticket("T-1004"))
    assert current is not None and current["revision"] == shown
    meanwhile = dict(current["data"], title="changed by another writer")
    service.replace("tickets", ticket("T-1004"), meanwhile)
    mine = dict(current["data"], title="my edit")
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **EDITED,
            "revision": str(shown),
            "document": orjson.dumps(mine).decode(),
            "csrf": csrf_of(page.text),
        },
    )
    assert r.status_code == 412
    assert 'id="edit-conflict"' in r.text
    assert f"you edited revision {shown}, it is now at revision {shown + 1}" in r.text
    assert "my edit" in r.text  # the person's text is kept in the form
    after = service.read("tickets", ticket("T-1004"))
    assert after is not None and after["revision"] == shown + 1
    assert after["data"]["title"] == "changed by another writer"
    # an edit without the revision it was made on is refused too
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**EDITED, "document": orjson.dumps(mine).decode(), "csrf": csrf_of(page.text)},
    )
    assert r.status_code == 422 and "no revision" in r.text
    assert service.read("tickets", ticket("T-1004")) == after


def test_an_erased_record_can_be_compared_and_created_again(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """An erased record shows revision 0 (absent) — the revision an edit expects to create it
    again — while Compare reaches back to the newest revision its history keeps."""
    client, service = seeded
    erased = {**EDITED, "key": "T-ERASED"}
    data = service.read("tickets", ticket("T-1004"))["data"]  # type: ignore[index]
    service.replace("tickets", ticket("T-ERASED"), data)
    service.merge("tickets", ticket("T-ERASED"), {"title": "second"})
    service.erase("tickets", ticket("T-ERASED"))
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params=erased)
    assert page.status_code == 200 and '<dd id="revision">0</dd>' in page.text
    compare = page.text.split('id="diff"')[1].split("</form>")[0]
    # revisions 1, 2 and the erase, 3 (where it reads as absent)
    assert compare.count('max="3"') == 2 and 'name="b" min="0" max="3" value="3"' in compare
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **erased,
            "revision": re.search(r'name="revision" value="(\d+)"', page.text)[1],  # type: ignore[index]
            "document": orjson.dumps(dict(data, title="back")).decode(),
            "csrf": csrf_of(page.text),
        },
        follow_redirects=False,
    )
    assert r.status_code == 303, r.text
    again = service.read("tickets", ticket("T-ERASED"))
    assert again is not None and again["revision"] == 4 and again["data"]["title"] == "back"


def test_history_pages_as_of_and_diff(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    sign_in(client, ADMIN)
    page = client.get(RECORD + "&rev=1&a=1&b=6")
    assert page.status_code == 200
    asof = page.text.split('id="asof"')[1].split("</section>")[0]
    assert "As of revision 1" in asof and "reproduce" not in asof
    diff = page.text.split('id="diff"')[1].split("</section>")[0]
    assert "status" in diff and "&#34;pending&#34;" in diff
    assert client.get(RECORD + "&rev=99").status_code == 404
    # a page of the timeline as htmx asks for it
    frag = client.get(RECORD.replace("/record?", "/record/history?"), headers={"HX-Request": "true"})
    assert frag.status_code == 200 and "<html" not in frag.text and "sync-T-1001" in frag.text
    # a page that cannot be read comes back as the row it replaces, saying why
    frag = client.get(
        RECORD.replace("/record?", "/record/history?") + "&cursor=abc", headers={"HX-Request": "true"}
    )
    assert frag.status_code == 422 and frag.text.startswith('<tr id="history-more"><td colspan="4">')
    assert "invalid-input" in frag.text and "cursor" in frag.text


def test_read_only_token_sees_no_write_controls_and_cannot_write(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, service = seeded
    sign_in(client, READER)
    page = client.get(RECORD)
    assert page.status_code == 200
    assert 'id="edit"' not in page.text and "checklist.add" not in page.text and "checklist.open" in page.text
    before = service.read("tickets", ticket("T-1001"))
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **SUBJECT,
            "revision": "1",
            "document": '{"title": "x", "status": "open"}',
            "csrf": csrf_of(page.text),
        },
    )
    assert r.status_code == 403 and "read-only" in r.text
    r = client.post(
        "/studio/states/tickets/record/jq",
        data={**SUBJECT, "program": "checklist.add", "input": '{"id": "sneak"}', "csrf": csrf_of(page.text)},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 403
    assert service.read("tickets", ticket("T-1001")) == before
    r = client.post(
        "/studio/states/tickets/record/jq",
        data={**SUBJECT, "program": "checklist.open", "csrf": csrf_of(page.text)},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 200 and "reproduce" in r.text


def test_tenant_limited_token_sees_only_its_tenants(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    sign_in(client, BILLING)
    listing = client.get("/studio/states/tickets")
    assert "T-1000" in listing.text and "T-1001" not in listing.text
    assert client.get(RECORD).status_code == 403
    assert (
        client.get("/studio/states/tickets/record?tk=agent&tn=billing&kind=ticket&key=T-1000").status_code
        == 200
    )
    agents = client.get("/studio/memory")
    assert "triage" not in agents.text and "docs-writer" not in agents.text
    assert client.get("/studio/memory/agent?agent=triage").status_code == 404
    assert client.get("/studio/memory/scope?agent=triage&scope=session&key=s-2041").status_code == 404


def test_memory_pages_send_lazy_children_only_when_asked(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    sign_in(client, ADMIN)
    agents = client.get("/studio/memory").text
    assert "triage" in agents and "docs-writer" in agents
    scopes = client.get("/studio/memory/agent?agent=triage").text
    assert "s-2041" in scopes and "s-2042" in scopes and "/srv/helpdesk" in scopes
    scope = client.get("/studio/memory/scope?agent=triage&scope=session&key=s-2041").text
    assert "notes" in scope and "observation 7" not in scope and "step 12" not in scope
    assert "patches[2]" in scope
    notes = client.get('/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=lazy&path=["notes"]')
    assert notes.status_code == 200 and "note-7" in notes.text and "observation" not in notes.text
    log = client.get('/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=lazy&path=["log"]').text
    assert "step 199" in log and "step 200" not in log and "100 more" in log  # a page of children
    more = client.get(
        '/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=lazy&path=["log"]&start=200'
    )
    assert "step 299" in more.text
    bad = client.get('/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=intents&path=["x"]')
    assert bad.status_code == 422
    context = client.get("/studio/memory/context?agent=triage&cwd=/srv/helpdesk&session=s-2041").text
    assert "State Flow runtime context" in context and "patch the exporter" in context
    assert "observation 7" not in context


def test_memory_pages_list_agents_once_and_reach_any_agent_name(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """The operator's door writes memory records the agents' tools refuse: a tool's (no agent's
    memory: not listed among the agents, and the list still ends) and an agent name with
    characters a URL path reserves (every link to it percent-encoded, its pages reachable)."""
    client, service = seeded
    operator = DoorContext(door="operator", actor="alice")
    odd = "we ird/a?#%&x=1"
    for kind, name in (("tool", "toolbot"), ("agent", odd)):
        subject = {"target_kind": kind, "target_name": name, "kind": "global", "key": "global"}
        service.replace("memory", subject, {"tactics": {"a": 1}}, context=operator)
    sign_in(client, ADMIN)
    listing = client.get("/studio/memory").text
    names = re.findall(r'<span class="strong">([^<]*)</span>', listing)
    assert len(names) == len(set(names)) and "toolbot" not in names
    assert "memory/agent?agent=triage" in listing and "More agents" not in listing
    assert 'id="other-targets"' in listing  # the tool's record: with the memory state's records
    tile = next(h for h in re.findall(r'class="tile" href="([^"]*)"', listing) if "we+ird" in h)
    assert "/" not in tile.split("?", 1)[1] and "#" not in tile
    agent = client.get(tile.replace("&amp;", "&"))
    assert agent.status_code == 200 and "we ird/a?#%&amp;x=1" in agent.text
    scope_link = re.search(r'href="(/studio/memory/scope\?[^"]*)"', agent.text)
    assert scope_link is not None
    scope = client.get(scope_link[1].replace("&amp;", "&"))
    assert scope.status_code == 200 and "tactics" in scope.text
    record = client.get(
        "/studio/states/memory/record", params={"tk": "agent", "tn": odd, "kind": "global", "key": "global"}
    ).text
    back = re.search(r'href="(/studio/memory/scope\?[^"]*)">scope page', record)
    assert back is not None and client.get(back[1].replace("&amp;", "&")).status_code == 200
    tool_record = client.get(
        "/studio/states/memory/record",
        params={"tk": "tool", "tn": "toolbot", "kind": "global", "key": "global"},
    ).text
    assert "tactics" in tool_record and "/studio/memory/scope" not in tool_record
    assert client.get("/studio/memory/agent").status_code == 422  # no agent named


def test_negative_positions_offsets_and_revisions_are_refused(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """A negative start, offset, revision or path index was used as given: a lazy page counted
    "260 more" of 250, an offset named a revision after the current one, history offsets ran
    [-5] [-4] …, and an index -1 read the last item."""
    client, _ = seeded
    sign_in(client, ADMIN)
    lazy = "/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=lazy&path="
    scope = "/studio/memory/scope?agent=triage&scope=session&key=s-2041"
    asked = {
        lazy + '["log"]&start=-10': "start must be a non-negative integer",
        lazy + '["log",-1]': "path must be a JSON array of keys and non-negative indices",
        scope + "&offset=-1": "offset must be a non-negative integer",
        scope + "&start=-5": "start must be a non-negative integer",
        scope + "&before=-1": "before must be a non-negative integer",
        RECORD + "&rev=-1": "rev must be a non-negative integer",
        RECORD + "&a=-1&b=2": "a must be a non-negative integer",
        RECORD + "&a=x&b=2": "a must be a non-negative integer",
    }
    for address, message in asked.items():
        r = client.get(address, headers={"HX-Request": "true"} if address.startswith(lazy) else {})
        assert r.status_code == 422 and message in r.text, address
    assert client.get(lazy + '["log"]&start=0').status_code == 200
    assert client.get(scope + "&offset=0").status_code == 200


def test_a_large_lazy_plane_is_browsed_node_by_node(seeded: tuple[TestClient, StatesService]) -> None:
    """A plane above the tree threshold: each open lists a page of one node's children from the
    nodes that hold them; a child that is itself large shows its kind and size unread."""
    client, service = seeded
    view = MemoryView(service.store, Identity("archivist", "/srv/arch", "a-1"))
    shelves = {f"shelf{k}": [f"item {k}-{i} " + "x" * 100 for i in range(3_000)] for k in range(4)}
    view.patch_state({"session": {"lazy": {"shelves": shelves, "note": "kept small"}}})
    sign_in(client, ADMIN)
    base = "/studio/memory/lazy?agent=archivist&scope=session&key=a-1&plane=lazy"
    top = client.get(base + "&path=[]")
    assert top.status_code == 200 and "shelves" in top.text and "kept small" in top.text
    shelf_list = client.get(base + '&path=["shelves"]').text
    assert "shelf3" in shelf_list and "3000 items" in shelf_list and "item 3-" not in shelf_list
    page = client.get(base + '&path=["shelves","shelf2"]&start=2500').text
    assert "item 2-2500 " in page and "item 2-2699 " in page and "item 2-2700 " not in page
    assert "300 more" in page
    assert client.get(base + '&path=["shelves","shelf9"]').status_code == 404


def test_extra_planes_are_shown_small_ones_whole_large_ones_lazily(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Roots a program declared beyond the built-in planes: the studio knows none of them, and
    still shows each — a small one with the hot planes, a large one by its outline (its values
    load when a node is opened)."""
    client, service = seeded
    roots = (
        ExtraRoot("board", {"type": "object"}),
        ExtraRoot("archive", {"type": "object"}, lazy=True),
    )
    view = MemoryView(
        service.store, Identity("planner", "/srv/plan", "p-1"), config=MemoryConfig(extra_roots=roots)
    )
    archive = {f"entry-{i:03}": f"archived text {i} " + "x" * 300 for i in range(300)}
    view.patch_state({"session": {"board": {"todo": ["write the plan"]}, "archive": archive}})
    sign_in(client, ADMIN)
    page = client.get("/studio/memory/scope?agent=planner&scope=session&key=p-1")
    assert page.status_code == 200
    assert "board" in page.text and "write the plan" in page.text  # small: shown whole
    assert "archive" in page.text and "entry-000" in page.text  # large: its outline
    assert "archived text" not in page.text  # … but none of its values
    top = client.get(
        "/studio/memory/lazy?agent=planner&scope=session&key=p-1&plane=archive&path=[]&start=200"
    )
    assert top.status_code == 200 and "entry-299" in top.text and "archived text 299" in top.text
    # a plane shown whole is not browsed through the lazy route
    assert (
        client.get(
            '/studio/memory/lazy?agent=planner&scope=session&key=p-1&plane=board&path=["todo"]'
        ).status_code
        == 422
    )


def test_docs_are_served_offline_with_the_bearer_scheme(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    page = client.get("/docs")
    assert page.status_code == 200
    assets = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert assets and all(a.startswith("/docs/assets/") for a in assets), assets
    for asset in assets:
        assert client.get(asset).status_code == 200
    schema = client.get("/openapi.json").json()
    schemes = schema["components"]["securitySchemes"]
    assert any(s["type"] == "http" and s["scheme"] == "bearer" for s in schemes.values())
    assert schema["security"]
    assert not any(p.startswith("/studio") for p in schema["paths"])


def test_sign_out_ends_the_session(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    sign_in(client, ADMIN)
    page = client.get("/studio/states")
    assert client.post("/studio/logout", data={"csrf": "forged"}).status_code == 403
    assert client.get("/studio/states", follow_redirects=False).status_code == 200
    r = client.post("/studio/logout", data={"csrf": csrf_of(page.text)}, follow_redirects=False)
    assert r.status_code == 303
    assert client.get("/studio/states", follow_redirects=False).status_code == 303


def test_search_by_kind_and_containment_fills_its_page(seeded: tuple[TestClient, StatesService]) -> None:
    """The kind is part of the search, not a filter over a page of it: 59 matches of one kind
    ahead of 3 of another still show the 3 on the first page."""
    client, service = seeded
    decl = {
        "schema": {"type": "object", "properties": {"open": {"type": "boolean"}}},
        "subject_kinds": ["alpha", "beta"],
        "default_subject_kind": "alpha",
    }
    service.declare("queue", decl)
    for kind, n in (("alpha", 60), ("beta", 3)):
        for i in range(n):
            subject = {"target_kind": "agent", "target_name": "triage", "kind": kind, "key": f"{kind}-{i:02}"}
            service.replace("queue", subject, {"open": i != 7})
    sign_in(client, ADMIN)
    page = client.get("/studio/states/queue", params={"kind": "beta", "filters": '{"open": true}'})
    assert page.status_code == 200
    assert all(f"beta-{i:02}" in page.text for i in range(3)) and "alpha-" not in page.text
    assert 'id="next-page"' not in page.text
    page = client.get("/studio/states/queue", params={"kind": "alpha", "filters": '{"open": true}'})
    assert page.text.count("key=alpha-") == 50 and "beta-" not in page.text and "alpha-07" not in page.text
    assert 'id="next-page"' in page.text


def _ranked(service: StatesService, count: int) -> None:
    """A state ``ranked`` of ``count`` open items ``i-000``…, each ranked ``(i * 37) % count``
    (every rank once, in no order of the keys)."""
    decl = {
        "schema": {"type": "object", "properties": {"rank": {"type": "integer"}}},
        "subject_kinds": ["item"],
        "default_subject_kind": "item",
    }
    service.declare("ranked", decl)
    for i in range(count):
        subject = {"target_kind": "agent", "target_name": "triage", "kind": "item", "key": f"i-{i:03}"}
        service.replace("ranked", subject, {"rank": (i * 37) % count, "open": True})


def test_search_sorts_by_a_member_and_its_pages_keep_the_sort(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """A sort given on the state page orders the search, and Next and First page carry it: the
    walk lists every match once, in the sort's order, and a page reloads from its URL."""
    client, service = seeded
    _ranked(service, 120)
    sign_in(client, ADMIN)
    params = {"filters": '{"open": true}', "sort": '[{"path": ["rank"], "order": "desc"}]'}
    page = client.get("/studio/states/ranked", params=params)
    assert page.status_code == 200 and "alert-error" not in page.text
    walked: list[str] = []
    while True:
        walked += re.findall(r"key=(i-\d{3})", page.text)
        nxt = re.search(r'id="next-page" href="([^"]+)"', page.text)
        if nxt is None:
            break
        link = html.unescape(nxt[1])
        assert "sort=" in link and "cursor=" in link
        page = client.get(link)
        assert page.status_code == 200 and "alert-error" not in page.text
        assert html.unescape(re.findall(r'href="([^"]+)">« First page', page.text)[0]).count("sort=") == 1
        assert client.get(link).text == page.text  # (the page reloads from its URL)
    ranks = {f"i-{i:03}": (i * 37) % 120 for i in range(120)}
    assert walked == sorted(ranks, key=lambda k: -ranks[k])
    bad = client.get("/studio/states/ranked", params={**params, "sort": "[{"})
    assert "the sort is not valid JSON" in bad.text
    alone = client.get("/studio/states/ranked", params={"sort": params["sort"]})
    assert "a sort orders the matches of a filter: give a filter too" in alone.text


def test_previous_page_walks_a_keyset_listing_back_page_by_page(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Keyset cursors only go forward: each page's links carry the cursors before it, so Previous
    shows exactly the page seen before it, on a sorted search as on the plain listing, and the
    first page has none. The memory lists page back the same way."""
    client, service = seeded
    _ranked(service, 170)
    sign_in(client, ADMIN)
    sorted_search = {"filters": '{"open": true}', "sort": '[{"path": ["rank"], "order": "desc"}]'}
    for params in ({}, sorted_search):
        page = client.get("/studio/states/ranked", params=params)
        assert 'id="previous-page"' not in page.text
        seen = [re.findall(r"key=(i-\d{3})", page.text)]
        while nxt := re.search(r'id="next-page" href="([^"]+)"', page.text):
            page = client.get(html.unescape(nxt[1]))
            assert page.status_code == 200 and "alert-error" not in page.text
            seen.append(re.findall(r"key=(i-\d{3})", page.text))
        assert len(seen) == 4 and sum(map(len, seen)) == 170
        for before in reversed(seen[:-1]):
            back = re.search(r'id="previous-page" href="([^"]+)"', page.text)
            assert back is not None, before
            page = client.get(html.unescape(back[1]))
            assert re.findall(r"key=(i-\d{3})", page.text) == before
        assert 'id="previous-page"' not in page.text  # (back at the first page)
    for n in range(60):  # more agents than a page of the memory list holds
        service.replace(
            "memory",
            {"target_kind": "agent", "target_name": f"a-{n:02}", "kind": "global", "key": "global"},
            {},
        )
    first = client.get("/studio/memory")
    more = re.search(r'id="next-page" href="([^"]+)"', first.text)
    assert more is not None and 'id="previous-page"' not in first.text
    second = client.get(html.unescape(more[1]))
    assert "a-59" in second.text and "a-59" not in first.text
    back = re.search(r'id="previous-page" href="([^"]+)"', second.text)
    assert back is not None and client.get(html.unescape(back[1])).text == first.text


def test_a_session_outlives_a_server_restart_but_not_its_token(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Sessions are signed cookies, nothing is kept per session on the server: a server started
    again with the same tokens (or another worker) accepts the cookie and its forms; one that no
    longer accepts the token does not, and a tampered cookie is refused."""
    client, service = seeded
    assert sign_in(client, ADMIN).status_code == 303
    cookie = client.cookies["stateflow_studio"]
    assert ADMIN not in cookie
    csrf = csrf_of(client.get("/studio/states/tickets/record", params=EDITED).text)

    def fresh_server(*specs: str) -> TestClient:
        app = create_app(service, TokenSet([parse_token(s) for s in specs]))
        return TestClient(app, base_url="http://127.0.0.1", cookies={"stateflow_studio": cookie})

    with fresh_server(ADMIN, READER + ":read") as again:
        page = again.get("/studio/states/tickets/record", params=EDITED, follow_redirects=False)
        assert page.status_code == 200 and csrf_of(page.text) == csrf
        before = service.read("tickets", ticket("T-1004"))
        assert before is not None
        edited = dict(before["data"], title="after the restart")
        r = again.post(
            "/studio/states/tickets/record/edit",
            data={
                **EDITED,
                "revision": str(before["revision"]),
                "document": orjson.dumps(edited).decode(),
                "csrf": csrf,
            },
            follow_redirects=False,
        )
        assert r.status_code == 303
    with fresh_server(READER + ":read") as revoked:  # the admin token is gone
        assert revoked.get("/studio/states", follow_redirects=False).status_code == 303
    tampered = cookie[:-2] + ("AA" if not cookie.endswith("AA") else "BB")
    with fresh_server(ADMIN) as forged:
        forged.cookies.set("stateflow_studio", tampered)
        assert forged.get("/studio/states", follow_redirects=False).status_code == 303


def test_stateflow_serve_serves_the_studio_and_docs(tmp_path: Path) -> None:
    """The real command: the studio and the docs' assets answer; sign-in works over the wire."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, STATEFLOW_STORE=str(tmp_path / "serve.db"), STATEFLOW_TOKENS="")
    proc = subprocess.Popen(
        ["stateflow", "serve", "--port", str(port), "--token", ADMIN],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stderr is not None
        lines: list[str] = []
        while not any(f"http://127.0.0.1:{port}/studio" in line for line in lines):
            lines.append(proc.stderr.readline())  # (which tokens, the API, then the studio)
            assert len(lines) <= 5 and lines[-1], lines
        base = f"http://127.0.0.1:{port}"
        # Deadlines for a loaded machine (importing the server, the first asset), not the server's.
        with httpx.Client(base_url=base, timeout=60) as client:
            deadline = time.monotonic() + 120
            while True:
                try:
                    client.get("/api/health")
                    break
                except (OSError, httpx.TransportError):  # httpx's connect errors are not OSErrors
                    assert proc.poll() is None, "stateflow serve exited"
                    assert time.monotonic() < deadline, "stateflow serve did not answer"
                    time.sleep(0.1)
            assert client.get("/docs/assets/swagger-ui-bundle.js").status_code == 200
            assert client.get("/studio/static/htmx.min.js").status_code == 200
            r = sign_in(client, ADMIN)
            assert r.status_code == 303
            assert "memory" in client.get("/studio/states").text
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def test_document_text_is_escaped_everywhere_it_is_shown(seeded: tuple[TestClient, StatesService]) -> None:
    client, service = seeded
    subject = {"target_kind": "agent", "target_name": "triage", "kind": "customer", "key": "<i>x</i>"}
    service.replace("profiles", subject, {"tone": "<script>alert(1)</script>", "<b>k</b>": [1, "<u>"]})
    sign_in(client, ADMIN)
    page = client.get(
        "/studio/states/profiles/record",
        params={"tk": "agent", "tn": "triage", "kind": "customer", "key": "<i>x</i>"},
    )
    assert page.status_code == 200
    for raw in ("<script>alert(1)", "<b>k</b>", "<u>", "<i>x</i>"):
        assert raw not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text and "&lt;b&gt;k&lt;/b&gt;" in page.text
    listing = client.get("/studio/states/profiles").text
    assert "<i>x</i>" not in listing and "&lt;i&gt;x&lt;/i&gt;" in listing


def test_an_unchanged_save_says_no_change_not_a_new_revision(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, service = seeded
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params=EDITED)
    before = service.read("tickets", ticket("T-1004"))
    assert before is not None
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **EDITED,
            "revision": str(before["revision"]),
            "document": orjson.dumps(before["data"]).decode(),
            "csrf": csrf_of(page.text),
        },
    )
    assert r.status_code == 200
    assert f"No change: the record is already at revision {before['revision']}." in r.text
    assert "Saved as revision" not in r.text
    assert service.read("tickets", ticket("T-1004")) == before


def test_a_save_confirms_the_revision_it_wrote_not_a_later_one(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Another writer may move the record on between the save and the page shown after it:
    the confirmation names the save's own revision, the page's facts the current one."""
    client, service = seeded
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params=EDITED)
    before = service.read("tickets", ticket("T-1004"))
    assert before is not None
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={
            **EDITED,
            "revision": str(before["revision"]),
            "document": orjson.dumps(dict(before["data"], title="saved in the studio")).decode(),
            "csrf": csrf_of(page.text),
        },
        follow_redirects=False,
    )
    assert r.status_code == 303
    mine = before["revision"] + 1
    service.replace("tickets", ticket("T-1004"), dict(before["data"], title="another writer"))
    shown = client.get(r.headers["location"]).text
    assert f"Saved as revision {mine}." in shown
    assert f'id="revision">{mine + 1}<' in shown
    # a confirmation is only a message: a value that is no revision shows none
    odd = client.get("/studio/states/tickets/record", params={**EDITED, "saved": "x<b>"})
    assert odd.status_code == 200 and "Saved as" not in odd.text
    # and only the save's own: a link naming a revision (or an outcome) nobody saved, or the
    # confirmation's signature moved to another revision or record, shows none either
    signed = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(r.headers["location"]).query))
    forged = [
        {**EDITED, "saved": "999"},
        {**EDITED, "unchanged": str(mine)},
        {**EDITED, "saved": "999", "ok": signed["ok"]},
        {**EDITED, "unchanged": str(mine), "ok": signed["ok"]},
        {**EDITED, "key": "T-1001", "saved": str(mine), "ok": signed["ok"]},
    ]
    for params in forged:
        page = client.get("/studio/states/tickets/record", params=params)
        assert page.status_code == 200 and "Saved as" not in page.text and "No change:" not in page.text, (
            params
        )
    other = TestClient(client.app)  # (another person's session: the same link shows nothing)
    sign_in(other, ADMIN)
    assert "Saved as" not in other.get(r.headers["location"]).text
    assert f"Saved as revision {mine}." in client.get(r.headers["location"]).text


def test_a_record_page_says_when_nothing_was_ever_written_there_or_it_was_erased(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """A mistyped key opens a page for a record that does not exist: it says so (and that a
    save would create it) rather than look like an empty record; an erased one says it was."""
    client, service = seeded
    sign_in(client, ADMIN)
    typo = client.get("/studio/states/tickets/record", params={**EDITED, "key": "T-1004typo"})
    assert typo.status_code == 200
    assert "No record here: ticket/T-1004typo has never been written under agent/triage" in typo.text
    assert "save a document below to create it" in typo.text
    assert 'id="absent"' not in client.get("/studio/states/tickets/record", params=EDITED).text
    service.erase("tickets", ticket("T-1004"))
    erased = client.get("/studio/states/tickets/record", params=EDITED).text
    assert "This record was erased: its history stays below" in erased and "No record here" not in erased


def test_a_large_record_page_stays_small_its_editor_offers_the_json_and_a_compare_is_cut(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """The tree was cut, but the editor carried the whole document and a compare rendered every
    changed path: a 20 MB record gave a 20 MB page a browser needed about a minute for."""
    client, service = seeded
    big = ticket("T-big")
    document = {"title": "big", "status": "open", "tags": ["y" * 1000] * 2000}
    service.replace("tickets", big, document)
    sign_in(client, ADMIN)
    params = {"tk": "agent", "tn": "triage", "kind": "ticket", "key": "T-big"}
    page = client.get("/studio/states/tickets/record", params=params)
    assert page.status_code == 200 and len(page.content) < 400_000
    assert 'id="edit-too-large"' in page.text and 'name="document"' not in page.text
    link = re.search(r'href="(/studio/states/tickets/record/json\?[^"]*)"', page.text)
    assert link is not None
    download = client.get(link[1].replace("&amp;", "&"))
    assert download.status_code == 200 and download.headers["content-type"] == "application/json"
    assert "attachment" in download.headers["content-disposition"]
    assert orjson.loads(download.content) == document
    # a document the editor takes is still edited in the page
    small = client.get("/studio/states/tickets/record", params=EDITED).text
    assert 'name="document"' in small and 'id="edit-too-large"' not in small
    # a compare of two revisions that differ in 5,000 places shows a page of them
    wide = ticket("T-wide")
    service.replace("tickets", wide, {"title": "w", "status": "open", "tags": [f"a{i}" for i in range(5000)]})
    service.replace("tickets", wide, {"title": "w", "status": "open", "tags": [f"b{i}" for i in range(5000)]})
    compare = client.get(
        "/studio/states/tickets/record", params={**params, "key": "T-wide", "a": "1", "b": "2"}
    )
    assert compare.status_code == 200 and len(compare.content) < 400_000
    shown = compare.text.count('<td class="before">')
    assert 0 < shown <= 500 and f"and {5000 - shown} more changed paths" in compare.text


def test_a_huge_key_is_cut_like_a_huge_value(seeded: tuple[TestClient, StatesService]) -> None:
    """Values were cut at 400 characters, keys sent and drawn whole (a 100,000-character key:
    about fifty screens); in the tree and in the timeline's touched paths alike."""
    client, service = seeded
    huge = "K" * 100_000
    subject = ticket("T-keys")
    service.replace("tickets", subject, {"title": "keys", "status": "open", "extra": {huge: "v"}})
    service.merge("tickets", subject, {"extra": {huge: "w"}})
    sign_in(client, ADMIN)
    page = client.get("/studio/states/tickets/record", params={**EDITED, "key": "T-keys"}).text
    shown = page.split('id="edit"')[0] + page.split("</textarea>")[1]  # (the editor holds it whole)
    assert max(len(run) for run in re.findall("K+", shown)) == 400
    assert 'title="100000 characters"' in shown


def test_signing_in_again_returns_to_the_page_not_a_fragment_or_a_form_action(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """After a session ends, an htmx request comes back to the page it was sent from and a
    form to the page the form is on; never to the fragment's URL or the POST-only action."""
    client, _ = seeded
    history = RECORD.replace("/record?", "/record/history?") + "&cursor=abc"
    r = client.get(
        history,
        headers={"HX-Request": "true", "HX-Current-URL": "http://127.0.0.1" + RECORD + "&rev=2"},
        follow_redirects=False,
    )
    assert r.headers["HX-Redirect"] == "/studio/login?" + urlencode({"next": RECORD + "&rev=2"})
    # a page elsewhere is not a place to come back to
    for elsewhere in (
        "http://evil.example/phish",
        "http://evil.example/studio/states/tickets",
        "http://127.0.0.1/api/states",
        "",
    ):
        r = client.get(history, headers={"HX-Request": "true", "HX-Current-URL": elsewhere})
        assert r.headers["HX-Redirect"] == "/studio/login?next=%2Fstudio%2Fstates"
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**SUBJECT, "revision": "6", "document": "{}", "csrf": "x"},
        follow_redirects=False,
    )
    assert r.status_code == 303
    assert r.headers["location"] == "/studio/login?" + urlencode({"next": RECORD})
    r = client.post("/studio/states/tickets/record/jq", data={"program": "x"}, follow_redirects=False)
    assert r.headers["location"] == "/studio/login?next=%2Fstudio%2Fstates"  # no record named
    # and the sign-in form sends the person there
    form = client.get("/studio/login", params={"next": RECORD})
    nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
    assert nonce is not None
    r = client.post(
        "/studio/login",
        data={"token": ADMIN, "login_csrf": nonce[1], "next": RECORD},
        follow_redirects=False,
    )
    assert r.status_code == 303 and r.headers["location"] == RECORD


def test_signing_in_never_leaves_the_studio_through_dot_segments(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """``/studio/../api/states`` starts with the studio's prefix, and a browser resolves it to
    ``/api/states``: a path that resolves out of the studio is replaced by the catalog."""
    client, _ = seeded
    outside = [
        "/studio/../api/states",
        "/studio/%2e%2e/api/states",
        "/studio/.%2E/api/states",
        "/studio/..%2fapi/states",
        "/studio/states/./../../docs",
        "/studio/\t../api/states",
        "/studio/.\n./api/states",
    ]
    inside = RECORD.replace("T-1001", "a/../b%2F..")  # dots in a key travel in the query: kept
    for wanted in [*outside, inside]:
        form = client.get("/studio/login")
        nonce = re.search(r'name="login_csrf" value="([^"]+)"', form.text)
        assert nonce is not None
        r = client.post(
            "/studio/login",
            data={"token": ADMIN, "login_csrf": nonce[1], "next": wanted},
            follow_redirects=False,
        )
        assert r.status_code == 303
        assert r.headers["location"] == (inside if wanted == inside else "/studio/states"), wanted
        client.cookies.clear()


def test_unknown_studio_urls_answer_a_studio_page(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    r = client.get("/studio/nowhere", follow_redirects=False)
    assert r.status_code == 303 and r.headers["location"] == "/studio/login?next=%2Fstudio%2Fnowhere"
    sign_in(client, ADMIN)
    assert client.get("/studio/static/studio.js").headers["content-type"].startswith("text/javascript")
    for path in (
        "/studio/nowhere",
        "/studio/states/tickets/x/y",
        "/studio/static/nope.css",  # under the studio's files, too
    ):
        r = client.get(path)
        assert r.status_code == 404 and r.headers["content-type"].startswith("text/html"), path
        assert f"the studio has no page {path}" in r.text
        assert 'id="back"' in r.text and 'href="/studio/states"' in r.text
    assert client.get("/api/nowhere").headers["content-type"].startswith("application/json")


def test_timeline_rows_show_whole_document_writes_and_every_origin_field(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, _ = seeded
    sign_in(client, ADMIN)
    rows = client.get(RECORD).text.split('id="history-rows"')[1].split("</tbody>")[0]
    first = rows.split('<tr class="hrow">')[-1]  # revision 1: the replace that created it
    assert "replace" in first and "(whole document)" in first
    scope = "/studio/states/memory/record?tk=agent&tn=triage&kind=session&key=s-2041"
    rows = client.get(scope).text.split('id="history-rows"')[1].split("</tbody>")[0]
    newest = rows.split('<tr class="hrow">')[1]
    assert '<span class="chip chip-action">patch_state</span>' in newest
    assert '<span class="k">tool</span> <span class="mono">patch_state</span>' in newest


def test_a_survivors_timeline_shows_the_fold_and_the_folded_records_writes(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, service = seeded
    sign_in(client, ADMIN)
    service.replace("tickets", ticket("FOLDED-SRC"), {"title": "src", "status": "open"})
    service.replace("tickets", ticket("FOLDED-DST"), {"title": "dst", "status": "open"})
    service.fold(
        "tickets",
        ticket("FOLDED-SRC"),
        ticket("FOLDED-DST"),
        "switch",
        context=DoorContext(door="operator", actor="alice"),
    )
    for key in ("FOLDED-SRC", "FOLDED-DST"):
        page = client.get(RECORD.replace("T-1001", key)).text
        rows = page.split('id="history-rows"')[1].split("</tbody>")[0].split('<tr class="hrow">')[1:]
        fold = rows[0]  # the newest: the fold, which erased the folded record
        assert '<span class="chip chip-action">fold</span>' in fold and "alice" in fold
        assert ">ticket/FOLDED-SRC</span>" in fold and "view</a>" not in fold  # it erased the folded one
        assert ">ticket/FOLDED-SRC</span>" not in rows[1] and "view</a>" in rows[1]  # the survivor's
        assert ">ticket/FOLDED-SRC</span>" in rows[2]  # the folded record's own revision 1
        # viewable as that record was then (by the write's seq): not the survivor's revision 1
        link = rows[2].split('<a href="')[1].split('"')[0].replace("&amp;", "&")
        assert "of_key=FOLDED-SRC" in link and "seq=" in link, rows[2]
        view = client.get(link)
        assert view.status_code == 200, view.text
        shown = view.text.split('id="asof"')[1].split("</section>")[0]
        assert "As of revision 1 of ticket/FOLDED-SRC" in shown and "src" in shown and "dst" not in shown
    # a subject not folded into the record is refused, never read through its page
    r = client.get(RECORD.replace("T-1001", "FOLDED-DST") + "&seq=1&of_kind=ticket&of_key=T-1001")
    assert r.status_code == 422 and "not a subject folded into this record" in r.text


def test_a_record_forms_address_leads_to_the_record_and_refusals_name_it(
    seeded: tuple[TestClient, StatesService],
) -> None:
    client, _ = seeded
    r = sign_in(client, ADMIN)
    for form in ("edit", "jq"):
        r = client.get(RECORD.replace("/record?", f"/record/{form}?"), follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == RECORD, (form, r.headers)
        # (the address a page from before the subject was in it posted to: the state's records)
        r = client.get(f"/studio/states/tickets/record/{form}", follow_redirects=False)
        assert r.status_code == 303 and r.headers["location"] == "/studio/states/tickets"
    page = client.get(RECORD).text
    assert f'action="{RECORD.replace("/record?", "/record/edit?").replace("&", "&amp;")}"' in page
    # a refused save, and a refused form, stand at the record's address (the page's data-address)
    r = client.post(
        "/studio/states/tickets/record/edit",
        data={**SUBJECT, "csrf": csrf_of(page), "revision": "1", "document": "{"},
    )
    assert r.status_code == 422 and f'data-address="{RECORD.replace("&", "&amp;")}#edit"' in r.text
    r = client.post("/studio/states/tickets/record/edit", data={**SUBJECT, "csrf": "stale", "document": "{}"})
    assert r.status_code == 403 and f'data-address="{RECORD.replace("&", "&amp;")}"' in r.text


def test_json_refusals_name_the_field_once(seeded: tuple[TestClient, StatesService]) -> None:
    client, _ = seeded
    sign_in(client, ADMIN)
    page = client.get(RECORD)
    r = client.post(
        "/studio/states/tickets/record/jq",
        data={**SUBJECT, "program": "checklist.add", "input": "{nope", "csrf": csrf_of(page.text)},
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 422 and "input is not valid JSON: unexpected character" in r.text
    assert "invalid JSON" not in r.text
    r = client.get(
        "/studio/memory/lazy?agent=triage&scope=session&key=s-2041&plane=lazy&path=%5B",
        headers={"HX-Request": "true"},
    )
    assert r.status_code == 422 and "path is not valid JSON: " in r.text and "invalid JSON" not in r.text


def test_the_retention_shown_is_the_one_the_sweep_applies(store: SqlStore) -> None:
    """A state without ``retention_days`` of its own was shown "kept" even where the deployment
    default sweeps it; the studio now names that default, and keeps "kept" for what no sweep
    erases (the built-in memory, a state exempt from retention)."""
    from stateflow.config import Config, RetentionConfig

    service = StatesService(store, Config(retention=RetentionConfig(default_days=30)))
    service.install_builtins()
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}}
    decl = {"schema": schema, "subject_kinds": ["thread"], "default_subject_kind": "thread"}
    service.declare("by_default", decl)
    service.declare("own", {**decl, "retention_days": 7})
    service.declare("exempt", {**decl, "retention_exempt": True})
    with TestClient(
        create_app(service, TokenSet([parse_token(ADMIN)])), base_url="http://127.0.0.1"
    ) as client:
        sign_in(client, ADMIN)
        listing = client.get("/studio/states").text
        page = {
            name: client.get(f"/studio/states/{name}").text
            for name in ("by_default", "own", "exempt", "memory")
        }
    assert "30 days (the deployment default)" in page["by_default"]
    assert "<dd>7 days</dd>" in page["own"]
    assert "exempt: trimmed by the code that writes it" in page["exempt"]
    assert "<dd>kept until erased</dd>" in page["memory"]
    assert "<td>30 days (the deployment default)</td>" in listing and "<td>exempt</td>" in listing


def _diff_card(page: str) -> str:
    return page.split('id="diff"')[1].split("</section>")[0]


def test_a_memory_scopes_compare_lists_its_lazy_plane_writes_never_same_document(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """A compare reads a scope's hot planes only: a revision that changed only a lazy plane was
    called "the same document", and lazy changes beside hot ones went unmentioned."""
    client, service = seeded
    view = MemoryView(service.store, Identity("coder", "/tmp/p", "cmp-1"))
    view.patch_state({"session": {"tactics": {"step": 1}, "lazy": {"notes": ["a", "b", "c1"]}}})
    view.patch_state({"session": {"lazy": {"notes": ["a", "b", "CHANGED"]}}})
    view.patch_state({"session": {"tactics": {"step": 2}, "lazy": {"log": {"k": "\u202ev"}}}})
    sign_in(client, ADMIN)
    record = "/studio/states/memory/record?tk=agent&tn=coder&kind=session&key=cmp-1"
    # the API's diff: a lazy edit
    api = client.get(
        "/api/states/memory/records/agent/coder/session/cmp-1/diff?from=1&to=2",
        headers={"Authorization": f"Bearer {ADMIN}"},
    )
    assert api.json()["data"]["edits"] == [[["lazy", "notes", 2], "CHANGED"]]

    only_lazy = _diff_card(client.get(record + "&a=1&b=2").text)
    assert "same document" not in only_lazy and "hot planes of revisions 1 and 2 are the same" in only_lazy
    assert "<code>lazy.notes[2]</code>" in only_lazy and "Lazy planes are not compared here" in only_lazy

    both = _diff_card(client.get(record + "&a=2&b=3").text)
    assert "tactics.step" in both and "<table" in both  # the hot change, as a row
    assert "<code>lazy.log</code>" in both and "lazy.notes" not in both  # only what 2→3 wrote
    assert "same" not in both

    whole = _diff_card(client.get(record + "&a=3&b=1").text)  # either order, every revision between
    assert "<code>lazy.notes[2]</code>" in whole and "<code>lazy.log</code>" in whole

    same = _diff_card(client.get(record + "&a=2&b=2").text)
    assert "Revisions 2 and 2 are the same document." in same and "diff-unread" not in same


def test_agent_and_context_pages_escape_hidden_characters(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """The agent and context pages drew an agent name, a working directory and a session key
    as stored, and the injected text raw: a U+202E reversed the rest of its line."""
    client, service = seeded
    agent, cwd, sid = "ag\u202eent", "/tmp/\u202ep", "s\u202e1"
    MemoryView(service.store, Identity(agent, cwd, sid)).patch_state(
        {"cwd": {"strategy": {"c": "y"}}, "session": {"strategy": {"v": "a\u202ebc"}}}
    )
    sign_in(client, ADMIN)
    mark = '<span class="esc" title="U+202E">\\u202e</span>'
    page = client.get("/studio/memory/agent", params={"agent": agent})
    assert page.status_code == 200
    body = page.text.split("</title>", 1)[1]
    # drawn text escaped; the form still sends the keys themselves (attribute values)
    assert f"ag{mark}ent" in body.split('class="pagehead"')[0]  # the breadcrumb
    assert f">/tmp/{mark}p</a>" in body and f">s{mark}1</a>" in body  # the scope links
    assert '<option value="/tmp/\u202ep">/tmp/\\u202ep</option>' in body
    assert '<option value="s\u202e1">s\\u202e1</option>' in body
    assert "\u202e" not in re.sub(r'(value|href)="[^"]*"', "", body)
    context = client.get("/studio/memory/context", params={"agent": agent, "cwd": cwd, "session": sid})
    assert context.status_code == 200
    text = context.text.split("</title>", 1)[1]
    assert f"/tmp/{mark}p" in text and f"ag{mark}ent" in text
    injected = text.split('id="context-text">')[1].split("</pre>")[0]
    assert f"a{mark}bc" in injected
    assert "\u202e" not in re.sub(r'(value|href)="[^"]*"', "", text)


def test_an_agents_scope_pages_count_truly_and_its_context_form_reaches_every_scope(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """With 1 global, 60 cwd and 160 session scopes (two pages): page 1 said "Sessions 139" as
    if a total, page 2 "Global 0 None." and "Working directories 0 None.", and the context
    form offered only this page's keys — "(none)" for working directories on page 2."""
    client, service = seeded
    agent = "ag-000"

    def scope(kind: str, key: str) -> None:
        subject = {"target_kind": "agent", "target_name": agent, "kind": kind, "key": key}
        service.replace("memory", subject, {"tactics": {"n": 1}})

    scope("global", "global")
    for n in range(60):
        scope("cwd", f"/w/{n:03}")
    for n in range(160):
        scope("session", f"s-{n:03}")
    sign_in(client, ADMIN)

    def heading(page: str, kind: str) -> str:
        card = page.split(f'id="scopes-{kind}"')[1].split("</section>")[0]
        found = re.search(r'<h2>[^<]*<span class="muted small[^"]*">([^<]*)</span>', card)
        assert found is not None
        return found[1] + (" None." if '<p class="muted">None.</p>' in card else "")

    first = client.get("/studio/memory/agent", params={"agent": agent}).text
    assert heading(first, "cwd") == "60" and heading(first, "global") == "1"
    assert heading(first, "session") == "139 on this page"
    nxt = re.search(r'id="next-page" href="([^"]+)"', first)
    assert nxt is not None
    second = client.get(html.unescape(nxt[1])).text
    assert heading(second, "session") == "21 on this page"
    for kind in ("cwd", "global"):
        card = second.split(f'id="scopes-{kind}"')[1].split("</section>")[0]
        assert "None on this page: they are listed on an earlier page" in card and "None." not in card
    for page in (first, second):  # the context form lists every key, whichever page it is on
        cwds = re.findall(r'<option value="(/w/\d{3})">', page)
        sessions = re.findall(r'<option value="(s-\d{3})">', page)
        assert len(cwds) == 60 and len(sessions) == 160 and "(none)" not in page
    shown = client.get("/studio/memory/context", params={"agent": agent, "cwd": "/w/059", "session": "s-159"})
    assert shown.status_code == 200 and "s-159" in shown.text


def test_a_scopes_history_pages_back_and_its_offsets_keep_the_page(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Page 2 of a scope's history offered only "Older »", and its [n] links dropped the page:
    opening [25] showed the scope as of then beside page 1 of the history again."""
    client, service = seeded
    view = MemoryView(service.store, Identity("coder", "/tmp/p", "hist"))
    for n in range(50):
        view.patch_state({"session": {"tactics": {"n": n}}})
    sign_in(client, ADMIN)
    scope = "/studio/memory/scope?agent=coder&scope=session&key=hist"

    def offsets(page: str) -> list[int]:
        return [int(n) for n in re.findall(r'class="offset" href="[^"]*"[^>]*>\[(\d+)\]', page)]

    def link(page: str, text: str) -> str:
        found = re.search(rf'href="([^"]+)">{text}</a>', page)
        assert found is not None, text
        return html.unescape(found[1])

    first = client.get(scope).text
    assert offsets(first) == list(range(20)) and 'id="history-newer"' not in first
    assert 'id="history-newest"' not in first
    second = client.get(link(first, "Older »")).text
    third = client.get(link(second, "Older »")).text
    assert offsets(second) == list(range(20, 40)) and offsets(third) == list(range(40, 50))
    assert client.get(link(third, "‹ Newer")).text == second
    assert client.get(link(second, "‹ Newer")).text == first
    newest = client.get(link(third, "« Newest")).text
    assert offsets(newest) == list(range(20))
    # an offset opened from page 2 shows that point beside page 2, and closing it keeps the page
    asked = re.search(r'class="offset" href="([^"]*)"[^>]*>\[25\]', second)
    assert asked is not None
    at_25 = client.get(html.unescape(asked[1])).text
    assert "session[25]" in at_25 and offsets(at_25) == list(range(20, 40))
    assert '<span class="j-number">24</span>' in at_25.split('id="asof"')[1].split("</section>")[0]
    close = re.search(r'<a class="close" href="([^"]*)"', at_25)
    assert close is not None and offsets(client.get(html.unescape(close[1])).text) == list(range(20, 40))


def test_parameters_are_read_as_strictly_as_the_api_reads_them(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """A parameter given twice took its last value, and a revision in other digits than ASCII
    ones (a full-width 1) was read as a number, where the API refuses both."""
    client, service = seeded
    sign_in(client, ADMIN)
    scope = "/studio/memory/scope?agent=triage&scope=session&key=s-2041"
    asked = {
        RECORD + "&rev=1&rev=2": "the parameter 'rev' is given more than once",
        RECORD.replace("tk=agent", "tk=agent&tk=tool"): "the parameter 'tk' is given more than once",
        RECORD + "&rev=%EF%BC%91": "rev must be a non-negative integer (ASCII digits 0-9",
        RECORD + "&a=%D9%A1&b=2": "a must be a non-negative integer",
        RECORD + "&rev=+1": "rev must be a non-negative integer",
        RECORD + "&rev=" + "9" * 5000: "rev must be a non-negative integer",
        scope + "&offset=%E0%A5%A7": "offset must be a non-negative integer",
        "/studio/memory/agent?agent=triage&agent=docs-writer": "the parameter 'agent' is given more than once",
    }
    for address, message in asked.items():
        r = client.get(address)
        assert r.status_code == 422 and message in html.unescape(r.text), address
        assert "<h1" in r.text  # the studio's own error page
    assert client.get(RECORD + "&rev=1").status_code == 200
    # a form is read the same way: a field given twice writes nothing
    page = client.get(RECORD)
    before = service.read("tickets", ticket("T-1001"))
    assert before is not None
    r = client.post(
        "/studio/states/tickets/record/edit",
        content=urlencode(
            [
                *SUBJECT.items(),
                ("csrf", csrf_of(page.text)),
                ("revision", str(before["revision"])),
                ("document", '{"title": "a", "status": "open"}'),
                ("document", "{}"),
            ]
        ),
        headers={"content-type": "application/x-www-form-urlencoded"},
    )
    assert r.status_code == 422 and "'document' is given more than once" in html.unescape(r.text)
    after = service.read("tickets", ticket("T-1001"))
    assert after is not None and after["revision"] == before["revision"]


def test_a_folded_subjects_as_of_names_whose_revision_it_shows(
    seeded: tuple[TestClient, StatesService],
) -> None:
    """Read after its fold, a folded subject is the survivor: the page said "As of revision 4 of
    thread/fold-src" over the survivor's document, a revision fold-src never had. A seq with no
    of_kind/of_key was refused as an "invalid subject"."""
    client, service = seeded
    src, dst = (
        {"target_kind": "agent", "target_name": "bot", "kind": "thread", "key": k}
        for k in ("fold-src", "fold-dst")
    )
    service.replace("tickets", src, {"title": "src", "status": "open"})
    service.replace("tickets", dst, {"title": "dst", "status": "open"})
    service.fold("tickets", src, dst, "merge", context=DoorContext(door="operator", actor="alice"))
    service.merge("tickets", dst, {"priority": 3})
    survivor = service.read("tickets", dst)
    assert survivor is not None
    sign_in(client, ADMIN)
    record = "/studio/states/tickets/record?tk=agent&tn=bot&kind=thread&key=fold-dst"

    def asof(address: str) -> str:
        page = client.get(address)
        assert page.status_code == 200, page.text
        return page.text.split('id="asof"')[1].split("</section>")[0]

    late = asof(record + "&seq=999999&of_kind=thread&of_key=fold-src")
    assert f"As of revision {survivor['revision']} of this record" in late
    assert "of thread/fold-src (folded into this record)" not in late
    assert "had been folded into this record" in late and "dst" in late
    # a write of fold-src before the fold: its own revision, as before
    own = re.search(r'href="([^"]*seq=[^"]*of_key=fold-src[^"]*)"', client.get(record).text)
    assert own is not None
    early = asof(html.unescape(own[1]))
    assert "As of revision 1 of thread/fold-src (folded into this record)" in early and "src" in early
    r = client.get(record + "&seq=460")
    assert r.status_code == 422
    assert (
        "give that subject's of_kind and of_key too" in html.unescape(r.text)
        and "invalid subject" not in r.text
    )
