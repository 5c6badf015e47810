"""The studio in a real browser: Chromium driven by Playwright against a real server.

Set ``STATEFLOW_STUDIO_SCREENSHOTS=docs/studio`` to (re)take the screenshots shown in
docs/studio.md; without it the same steps run and nothing is written.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import threading
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import uvicorn
from playwright.sync_api import Browser, Page, Route, expect, sync_playwright

from stateflow.http.app import create_app
from stateflow.http.auth import TokenSet, parse_token
from stateflow.states import StatesService

from . import servers
from .studio_seed import seeded_store, ticket

ADMIN = "studio-admin-token-0001"
READER = "studio-reader-token-001"
BILLING = "studio-billing-token-01"
CHROMIUM = os.environ.get("STATEFLOW_CHROMIUM") or shutil.which("chromium") or "/usr/bin/chromium"
SHOTS = os.environ.get("STATEFLOW_STUDIO_SCREENSHOTS")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    # One backend here: the pages sit above the store API, and test_studio_http.py runs every
    # studio route on both backends; a browser walk-through per backend would double CI time.
    with seeded_store("sqlite", tmp_path_factory.mktemp("studio")) as (_, service):
        yield from _serve(service)


def _serve(service: StatesService) -> Iterator[str]:
    tokens = TokenSet(
        [parse_token(ADMIN), parse_token(READER + ":read"), parse_token(BILLING + "@agent/billing")]
    )
    config = uvicorn.Config(
        create_app(service, tokens), host="127.0.0.1", port=servers.free_port(), log_level="warning"
    )
    srv = uvicorn.Server(config)
    thread = threading.Thread(target=srv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 60
    while not srv.started:
        assert time.monotonic() < deadline and thread.is_alive(), "the studio server did not start"
        time.sleep(0.02)
    yield f"http://127.0.0.1:{config.port}"
    srv.should_exit = True
    thread.join(60)


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI"):
            raise pytest.UsageError(f"no Chromium at {CHROMIUM}: .ci/run installs Debian's chromium")
        pytest.skip(f"no Chromium at {CHROMIUM}")
    # Expectations wait up to 30 s, not Playwright's 5: rendering the docs page's large script
    # took longer than 5 s on a loaded machine. A page that never shows the text still fails.
    expect.set_options(timeout=30_000)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def shot(page: Page, name: str) -> None:
    if SHOTS:
        Path(SHOTS).mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(Path(SHOTS) / f"{name}.png"), full_page=True)


def sign_in(page: Page, base: str, token: str) -> None:
    page.goto(base + "/studio")
    expect(page).to_have_url(re.compile(r"/studio/login"))
    page.fill("#token", token)
    page.click("#sign-in")
    expect(page.locator("h1")).to_have_text("Declared states")


def test_operator_walks_through_the_studio(server: str, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)
    page.goto(server + "/studio/login")
    shot(page, "login")
    page.fill("#token", "not-a-token-this-server-knows")
    page.click("#sign-in")
    expect(page.locator(".alert-error")).to_contain_text("not one this server accepts")
    sign_in(page, server, ADMIN)
    cookie = next(c for c in context.cookies() if c["name"] == "stateflow_studio")
    assert cookie["httpOnly"] and cookie["sameSite"] == "Strict" and ADMIN not in cookie["value"]
    expect(page.locator("#states")).to_contain_text("tickets")
    shot(page, "states")

    # a state: its catalog entry and records, then a search
    page.click("#states >> text=tickets")
    expect(page.locator("h1")).to_contain_text("tickets")
    expect(page.locator("#records tbody tr")).to_have_count(13)
    page.fill("#search input[name=filters]", '{"status": "closed"}')
    page.click("#search button[type=submit]")
    expect(page.locator("#records tbody tr")).to_have_count(4)
    page.select_option("#search select[name=kind]", "ticket")
    page.fill("#search input[name=filters]", '{"priority": 2}')
    page.click("#search button[type=submit]")
    rows = page.locator("#records tbody tr")
    expect(rows).to_have_count(3)
    page.fill("#search input[name=filters]", "")
    page.click("#search button[type=submit]")
    shot(page, "state")

    # a record: document, timeline with origins, a diff between two revisions
    page.click("#records >> text=T-1001")
    expect(page.locator("h1")).to_have_text("T-1001")
    expect(page.locator("#revision")).to_have_text("6")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("helpdesk-sync")  # consumer
    expect(timeline).to_contain_text("sync-T-1001")  # op id
    expect(timeline).to_contain_text("token:3f9c2a1b7d40")  # actor
    expect(timeline).to_contain_text("add-reproduce")
    page.fill("#diff input[name=a]", "1")
    page.fill("#diff input[name=b]", "6")
    page.click("#compare")
    diff = page.locator("#diff table")
    expect(diff).to_contain_text("status")
    expect(diff.locator("tr", has_text="status").locator("td.before")).to_contain_text('"open"')
    expect(diff.locator("tr", has_text="status").locator("td.after")).to_contain_text('"pending"')
    shot(page, "record")
    page.locator("#timeline tr.hrow", has_text="replace").locator("text=view").click()
    expect(page.locator("#asof h2")).to_contain_text("As of revision 1")
    expect(page.locator("#asof")).not_to_contain_text("reproduce")

    # a template jq program, run from the page
    program = page.locator(".program-box", has_text="checklist.open")
    program.locator("button").click()
    expect(program.locator(".jq-result")).to_contain_text('"reproduce"')

    # an edit that breaks the schema is refused inline and writes nothing
    page.goto(page.url.split("&rev=")[0].split("#")[0])
    original = page.locator("#edit textarea").input_value()
    assert '"status": "pending"' in original
    page.fill("#edit textarea", original.replace('"pending"', '"lost"'))
    page.click("#save")
    expect(page.locator("#edit-error")).to_be_visible()
    expect(page.locator("#edit-error")).to_contain_text("status")
    expect(page.locator("#revision")).to_have_text("6")
    shot(page, "edit-error")
    text = page.locator("#edit textarea").input_value()
    assert '"lost"' in text  # what was typed stays, to be fixed
    page.fill("#edit textarea", original.replace('"pending"', '"closed"'))
    page.click("#save")
    expect(page.locator(".alert-ok")).to_contain_text("revision 7")

    # agent memory: agents → scopes → planes; the lazy tree loads children on demand
    page.click("nav >> text=Agent memory")
    page.click("#agents >> text=triage")
    expect(page.locator("#scopes-session")).to_contain_text("s-2041")
    page.click("#scopes-session >> text=s-2041")
    expect(page.locator("#planes")).to_contain_text("patch the exporter")
    lazy = page.locator("#lazy")
    expect(lazy).not_to_contain_text("observation 7")  # children are not sent with the page
    lazy.locator("summary", has_text="notes").click()
    expect(lazy).to_contain_text("note-7")
    lazy.locator("summary", has_text="note-7").click()
    expect(lazy).to_contain_text("observation 7")
    timeline = page.locator("#timeline")
    expect(timeline).to_contain_text("[2]")
    expect(timeline).to_contain_text("patches[1]")
    shot(page, "memory-scope")
    timeline.locator("a.offset", has_text="[2]").click()
    expect(page.locator("#asof")).to_contain_text("reproduce the export bug")
    page.click(".crumbs >> text=triage")
    page.select_option("select[name=session]", "s-2041")
    page.click("#show-context")
    expect(page.locator("#context-text")).to_contain_text("State Flow runtime context")
    expect(page.locator("#context-text")).not_to_contain_text("observation 7")
    shot(page, "context")

    # sign out: the session is gone, pages lead back to sign-in
    page.click("#sign-out")
    expect(page).to_have_url(re.compile(r"/studio/login"))
    page.goto(server + "/studio/states/tickets")
    expect(page).to_have_url(re.compile(r"/studio/login"))
    # the pages' content security policy blocked nothing they need (htmx runs without eval)
    assert not [e for e in console_errors if "Content Security Policy" in e], console_errors
    context.close()


def test_read_only_and_tenant_limited_tokens(server: str, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, READER)
    expect(page.locator(".badge-ro")).to_be_visible()
    record = f"{server}/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1001"
    page.goto(record)
    expect(page.locator("h1")).to_have_text("T-1001")
    expect(page.locator("#edit")).to_have_count(0)
    expect(page.locator("#save")).to_have_count(0)
    expect(page.locator("form.program-run", has_text="checklist.add")).to_have_count(0)
    expect(page.locator("form.program-run", has_text="checklist.open")).to_have_count(1)
    # the timeline's next page loads in place
    page.goto(record.replace("T-1001", "T-1012"))
    rows = page.locator("#history-rows tr.hrow")
    expect(rows).to_have_count(25)
    page.click("#history-more a")
    expect(rows).to_have_count(31)
    expect(page.locator("#history-more")).to_have_count(0)
    expect(rows.last).to_contain_text("replace")
    page.click("#sign-out")
    context.close()

    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, BILLING)
    page.goto(server + "/studio/states/tickets")
    expect(page.locator("#records tbody tr")).to_have_count(1)
    expect(page.locator("#records")).to_contain_text("T-1000")
    response = page.goto(record)
    assert response is not None and response.status == 403
    page.goto(server + "/studio/memory")
    expect(page.locator("#agents")).not_to_contain_text("triage")
    context.close()
    assert ticket("T-1001")["target_name"] == "triage"


def test_a_refused_jq_run_shows_its_error_and_clears_the_previous_result(
    server: str, browser: Browser
) -> None:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(f"{server}/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1002")
    add = page.locator(".program-box", has_text="checklist.add")
    add.locator("input[name=input]").fill('{"id": "call back"}')
    add.locator("button").click()
    expect(add.locator(".jq-result")).to_contain_text("Applied: yes")
    add.locator("input[name=input]").fill('{"id": ')  # refused (422): the page must say so
    add.locator("button").click()
    expect(add.locator(".jq-result .alert-error")).to_contain_text("input is not valid JSON")
    expect(add.locator(".jq-result")).not_to_contain_text("Applied")
    context.close()


def test_signing_in_again_returns_to_the_page_the_person_was_on(server: str, browser: Browser) -> None:
    """The session ends (signed out in another tab) while a record page is open: "Older
    revisions" (an htmx request) and Save (a form POST) lead to sign-in and, after it, back to
    the record page — not a bare fragment, not a JSON 405."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page, other = context.new_page(), context.new_page()
    record = f"{server}/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1012"

    def end_session_elsewhere() -> None:
        other.goto(server + "/studio/states")
        other.click("#sign-out")
        expect(other).to_have_url(re.compile(r"/studio/login"))

    def sign_in_again() -> None:
        expect(page).to_have_url(re.compile(r"/studio/login"))
        page.fill("#token", ADMIN)
        page.click("#sign-in")
        expect(page).to_have_url(record)
        expect(page.locator("h1")).to_have_text("T-1012")
        expect(page.locator("#history-rows tr.hrow")).to_have_count(25)

    sign_in(page, server, ADMIN)
    page.goto(record)
    end_session_elsewhere()
    page.click("#history-more a")
    sign_in_again()

    page.fill("#edit textarea", '{"title": "typed before the session ended"}')
    end_session_elsewhere()
    page.click("#save")
    sign_in_again()
    expect(page.locator("#revision")).to_have_text("31")  # nothing was written
    context.close()


def test_in_page_actions_say_when_the_server_does_not_answer_and_can_retry(
    server: str, browser: Browser
) -> None:
    """A request that gets no answer (the browser aborts it, as when the server is down): a lazy
    node, "Older revisions" and a jq run each show it where their result would go; once
    requests go through again, the same controls work — a lazy node reopened loads."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    down = ["**/studio/memory/lazy*", "**/record/history*", "**/record/jq"]
    for pattern in down:
        page.route(pattern, lambda route: route.abort())

    page.goto(server + "/studio/memory/scope?agent=triage&scope=session&key=s-2041")
    lazy = page.locator("#lazy")
    notes = lazy.locator("summary", has_text="notes")
    node = notes.locator("xpath=..")  # its <details>
    notes.click()
    expect(node.locator(".net-error")).to_contain_text("did not answer")
    expect(node).not_to_contain_text("loading")

    record = page.context.new_page()
    record.goto(f"{server}/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1012")
    for pattern in down:
        record.route(pattern, lambda route: route.abort())
    record.click("#history-more a")
    expect(record.locator("#history-more .net-error")).to_contain_text("did not answer")
    program = record.locator(".program-box", has_text="checklist.open")
    program.locator("button").click()
    expect(program.locator(".jq-result .net-error")).to_contain_text("did not answer")

    for pattern in down:
        page.unroute(pattern)
        record.unroute(pattern)
    notes.click()  # closed
    notes.click()  # opened again: loads now
    expect(lazy).to_contain_text("note-7")
    expect(lazy.locator(".net-error")).to_have_count(0)
    notes.click()
    notes.click()  # loaded once: kept, not loaded again
    expect(lazy).to_contain_text("note-7")
    record.click("#history-more a")
    expect(record.locator("#history-rows tr.hrow")).to_have_count(31)
    expect(record.locator("#timeline .net-error")).to_have_count(0)
    program.locator("button").click()
    expect(program.locator(".jq-result")).to_contain_text("result")
    expect(record.locator(".net-error")).to_have_count(0)
    context.close()


def test_pages_fit_their_window_a_phone_and_a_long_key(server: str, browser: Browser) -> None:
    """At phone width the top bar wraps (Sign out and the navigation were off-screen) and a
    wide table scrolls inside itself; at desktop width a long record key wraps in its cell
    instead of pushing the records table under the cards beside it."""
    key = "k" * 120
    api = f"{server}/api/states/profiles/records/agent/triage/customer/{key}"
    _call("PUT", api, {"Authorization": f"Bearer {ADMIN}"}, {"tone": "brief"})
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(server + "/studio/states/profiles")
    expect(page.locator("#records")).to_contain_text("kkkk")
    table, side = page.locator("#records").bounding_box(), page.locator(".side-col").bounding_box()
    assert table is not None and side is not None
    assert table["x"] + table["width"] <= side["x"]
    context.close()

    context = browser.new_context(viewport={"width": 375, "height": 800})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    for address in (
        "/studio/states",
        "/studio/states/tickets",
        "/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1001",
        "/studio/memory",
    ):
        page.goto(server + address)
        assert page.evaluate("document.documentElement.scrollWidth") <= 375, address
        for control in ("#sign-out", "nav >> text=API docs"):
            box = page.locator(control).bounding_box()
            assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= 375, (address, control)
    context.close()


def test_older_revisions_by_keyboard_keeps_the_focus_in_the_timeline(server: str, browser: Browser) -> None:
    """The button is replaced by the page it loads: the focus moves to that page's first row
    (it fell to <body>, and the next Tab went to the top of the page)."""
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(f"{server}/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1012")
    page.focus("#history-more a")
    page.keyboard.press("Enter")
    rows = page.locator("#history-rows tr.hrow")
    # Settled first: the browser's own autofocus focuses the new row as it is swapped in, and
    # htmx focuses it again when it settles (20 ms later, its classes then removed) — a Tab
    # pressed between the two had its focus taken back to the row.
    expect(rows.nth(25)).to_have_class("hrow")
    expect(rows.nth(25)).to_be_focused()
    page.keyboard.press("Tab")
    expect(rows.nth(25).locator("a", has_text="view")).to_be_focused()
    context.close()


def test_docs_render_offline_with_an_authorize_button(server: str, browser: Browser) -> None:
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    outside: list[str] = []

    def only_this_server(route: Route) -> None:
        if route.request.url.startswith(server):
            route.continue_()
        else:  # anything else would fail on a machine with no internet access
            outside.append(route.request.url)
            route.abort()

    context.route("**/*", only_this_server)
    page = context.new_page()
    page.goto(server + "/docs")
    expect(page.locator(".swagger-ui .info .title")).to_contain_text("stateflow")
    page.locator(".swagger-ui button.authorize").first.click()
    expect(page.locator(".swagger-ui .auth-container")).to_contain_text("bearer")
    page.goto(server + "/studio/login")
    expect(page.locator("#sign-in")).to_be_visible()
    assert outside == []
    context.close()


def test_an_erased_record_is_compared_and_written_again_in_the_browser(server: str, browser: Browser) -> None:
    """An erased record's page: revision 0 (absent), Compare reaching the newest revision
    its history keeps (the browser refuses a value over an input's max), and an edit that
    writes it again."""
    api = f"{server}/api/states/tickets/records/agent/triage/ticket/"
    auth = {"Authorization": f"Bearer {ADMIN}"}
    data = _call("GET", api + "T-1004", auth)["data"]["data"]
    _call("PUT", api + "T-GONE", auth, data)
    _call("DELETE", api + "T-GONE", auth)
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(server + "/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-GONE")
    expect(page.locator("#revision")).to_have_text("0")
    page.fill("#diff input[name=a]", "1")
    page.fill("#diff input[name=b]", "2")  # the erase
    page.click("#compare")
    expect(page.locator("#diff table")).to_contain_text("removed")
    page.fill("#edit textarea", json.dumps(data))
    page.click("#save")
    expect(page.locator(".alert-ok")).to_contain_text("revision 3")
    context.close()


def _call(method: str, url: str, headers: dict[str, str], body: object = None) -> dict[str, Any]:
    raw = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, raw, {**headers, "Content-Type": "application/json"}, method=method)
    with urllib.request.urlopen(request, timeout=60) as response:
        answer: dict[str, Any] = json.loads(response.read())
        return answer


def test_bidi_controls_in_keys_and_values_are_shown_escaped(server: str, browser: Browser) -> None:
    """A right-to-left override in a value reversed the rest of its line on the page, its closing
    quote included ("\u202egnp.exe" read as ""exe.png); it is shown as its escape, everywhere a
    record's text is drawn, and the editor's JSON escapes it too (the same value)."""
    key = "spoof\u202eRTL"
    api = f"{server}/api/states/tickets/records/agent/triage/ticket/spoof%E2%80%AERTL"
    auth = {"Authorization": f"Bearer {ADMIN}"}
    _call("PUT", api, auth, {"title": "\u202egnp.exe", "status": "open", "owner": "עברית"})
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(
        server
        + "/studio/states/tickets/record?"
        + urllib.parse.urlencode({"tk": "agent", "tn": "triage", "kind": "ticket", "key": key})
    )
    leaf = page.locator("#document li.leaf", has_text="gnp.exe")
    expect(leaf.locator(".j-string")).to_have_text('"\\u202egnp.exe"')
    # the closing quote is drawn last, at the right end of the value
    ends = leaf.locator(".j-string").evaluate(
        """e => { const r = document.createRange(); r.selectNodeContents(e);
            const last = e.lastChild; const q = document.createRange();
            q.setStart(last, last.length - 1); q.setEnd(last, last.length);
            return [Math.round(q.getBoundingClientRect().right), Math.round(r.getBoundingClientRect().right)]; }"""
    )
    assert ends[0] == ends[1], ends
    expect(page.locator("h1")).to_have_text("spoof\\u202eRTL")
    assert "\u202e" not in page.locator("body").inner_text()
    expect(page.locator("#document")).to_contain_text("עברית")  # right-to-left text itself is kept
    shot(page, "bidi")
    text = page.locator("#edit textarea").input_value()
    assert "\\u202egnp.exe" in text and "\u202e" not in text
    page.click("#save")  # the escaped JSON is the same document
    expect(page.locator(".alert-ok")).to_contain_text("No change")
    assert _call("GET", api, auth)["data"]["data"]["title"] == "\u202egnp.exe"
    context.close()


def test_a_refused_save_leaves_the_page_at_the_records_address(server: str, browser: Browser) -> None:
    """A refused save answered the form's POST in place, at the POST-only address of the form:
    Back came to "Confirm Form Resubmission" (ERR_CACHE_MISS), reload resubmitted, and the address
    opened again was a 404. The page now stands at the record's own address."""
    record = server + "/studio/states/tickets/record?tk=agent&tn=triage&kind=ticket&key=T-1002"
    context = browser.new_context(viewport={"width": 1360, "height": 900})
    page = context.new_page()
    sign_in(page, server, ADMIN)
    page.goto(record)
    revision = page.locator("#revision").inner_text()
    page.fill("#edit textarea", '{"title": ')
    page.click("#save")
    expect(page.locator("#edit-error")).to_contain_text("not valid JSON")
    expect(page.locator("#edit textarea")).to_have_value('{"title": ')  # the text is kept
    expect(page).to_have_url(record + "#edit")
    shot(page, "refused-save")
    page.reload()  # the record page again: no form resubmitted
    expect(page.locator("h1")).to_have_text("T-1002")
    expect(page.locator("#edit-error")).to_have_count(0)
    page.fill("#edit textarea", '{"title": ')
    page.click("#save")
    expect(page.locator("#edit-error")).to_be_visible()
    page.goto(server + "/studio/states")
    page.go_back()
    expect(page.locator("h1")).to_have_text("T-1002")
    expect(page.locator("#revision")).to_have_text(revision)  # nothing was written
    # the form's own address, opened as a page, is the record
    page.goto(server + "/studio/states/tickets/record/edit?tk=agent&tn=triage&kind=ticket&key=T-1002")
    expect(page).to_have_url(record)
    expect(page.locator("h1")).to_have_text("T-1002")
    context.close()
