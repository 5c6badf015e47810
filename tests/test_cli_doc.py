"""The real ``stateflow`` command, run as a user would."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from stateflow.errors import InvalidInput, UnsupportedStore
from stateflow.store import DocKey, Write, open_store
from stateflow.store.migrations import SCHEMA_VERSION
from tests.conftest import StoreFactory


def sf(
    *args: str, stdin: str | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["stateflow", *args], input=stdin, capture_output=True, text=True, timeout=60, env=env
    )


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "cli.db")


def test_round_trip_put_patch_get_history(db: str) -> None:
    put = sf("--store", db, "doc", "put", "notes", "demo", '{"title": "hello", "tags": ["a", "b"]}')
    assert put.returncode == 0, put.stderr
    assert "revision 1" in put.stderr
    assert json.loads(put.stdout) == {"revision": 1, "seq": 1}
    patch = sf("--store", db, "doc", "patch", "notes", "demo", '{"tags": {"[1]": "B"}, "done": false}')
    assert patch.returncode == 0, patch.stderr
    assert json.loads(patch.stdout) == {"revision": 2, "seq": 2}
    same = sf("--store", db, "doc", "patch", "notes", "demo", '{"done": false}')
    assert json.loads(same.stdout) == {"revision": 2, "seq": None}  # nothing changed: no transition
    got = sf("--store", db, "doc", "get", "notes", "demo")
    assert json.loads(got.stdout) == {"title": "hello", "tags": ["a", "B"], "done": False}
    old = sf("--store", db, "doc", "get", "notes", "demo", "--revision", "1")
    assert json.loads(old.stdout) == {"title": "hello", "tags": ["a", "b"]}
    history = json.loads(sf("--store", db, "doc", "history", "notes", "demo").stdout)
    assert [h["revision"] for h in history] == [2, 1]
    assert sorted(history[0]["edits"], key=str) == sorted([[["tags", 1], "B"], [["done"], False]], key=str)
    assert history[0]["origin"] == {"door": "operator"}


def test_stdin_input_and_store_from_environment(db: str) -> None:
    import os

    env = dict(os.environ, STATEFLOW_STORE=db)
    assert sf("doc", "put", "s", "k", "-", stdin='{"a": 1}', env=env).returncode == 0
    assert json.loads(sf("doc", "get", "s", "k", env=env).stdout) == {"a": 1}
    meta = json.loads(sf("doc", "get", "s", "k", "--meta", env=env).stdout)
    assert meta["revision"] == 1 and meta["body"] == {"a": 1}


def test_refusals_exit_1_with_a_coded_message_and_change_nothing(db: str) -> None:
    sf("--store", db, "doc", "put", "s", "k", '{"l": [1, 2]}')
    bad = sf("--store", db, "doc", "patch", "s", "k", '{"l": {"[5]": 0}}')
    assert bad.returncode == 1
    assert bad.stderr.startswith("error[invalid-patch]: array index [5] is out of bounds")
    assert sf("--store", db, "doc", "put", "s", "k", "[1]").returncode == 1
    assert "invalid-json" in sf("--store", db, "doc", "put", "s", "k", "{nope").stderr
    stale = sf("--store", db, "doc", "put", "s", "k", '{"x": 1}', "--expect", "0")
    assert stale.returncode == 1 and "error[conflict]" in stale.stderr
    assert json.loads(sf("--store", db, "doc", "get", "s", "k", "--meta").stdout)["revision"] == 1


def test_usage_errors_exit_2(db: str) -> None:
    assert sf("--store", db, "doc", "put", "s", "k").returncode == 2
    assert sf("--store", db, "nope").returncode == 2


def test_migrate_reports_versions(db: str, pg_schema_url: str) -> None:
    first = sf("--store", pg_schema_url, "migrate")
    assert first.returncode == 0 and f"migrated schema version 0 → {SCHEMA_VERSION}" in first.stdout
    again = sf("--store", pg_schema_url, "migrate")
    assert "schema is current" in again.stdout
    unmigrated = sf("--store", db.replace("cli.db", "x.db"), "migrate")
    assert unmigrated.returncode == 0


def test_messages_name_a_sqlite_store_by_the_url_of_its_absolute_path(tmp_path: Path) -> None:
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["stateflow", *args], capture_output=True, text=True, timeout=60, cwd=tmp_path)

    url = f"sqlite:///{tmp_path.resolve()}"  # (the working directory as the process sees it)
    assert run("--store", "./team.db", "migrate").stdout.startswith(
        f"{url}/team.db: migrated schema version 0"
    )
    assert (
        run("--store", "./team.db", "migrate").stdout
        == f"{url}/team.db: schema is current (version {SCHEMA_VERSION})\n"
    )
    missing = run("--store", "other.db", "doc", "get", "notes", "a")
    assert (
        missing.stderr
        == f"error[store-not-found]: no store at {url}/other.db (nothing was created; check --store)\n"
    )
    no_source = run("--store", "other.db", "backup", "copy.db")
    assert no_source.stderr == f"error[store-not-found]: no store at {url}/other.db\n"
    (tmp_path / "damaged.db").write_bytes(b"SQLite format 3\x00" + b"not a database" * 10)
    assert run("--store", "damaged.db", "check").stdout.startswith(f"{url}/damaged.db: checked nothing")
    (tmp_path / "other.json").write_bytes(b"not a database")
    assert run("--store", "other.json", "check").stderr.startswith(
        f"error[unsupported-store]: {url}/other.json is not a SQLite database"
    )


def test_a_postgres_store_that_is_not_migrated_says_how_to_fix_it(pg_schema_url: str) -> None:
    out = sf("--store", pg_schema_url, "doc", "get", "s", "k")
    assert out.returncode == 1
    assert "error[store-not-migrated]" in out.stderr and "migrate" in out.stderr


@pytest.mark.parametrize("location", ["?options=-csearch_path%3Dother", "notes.db?mode=ro"])
def test_a_store_location_with_url_options_but_no_scheme_is_refused_and_creates_no_file(
    tmp_path: Path, location: str
) -> None:
    # a PostgreSQL query string pasted without its URL once made a SQLite file named after it
    out = subprocess.run(
        ["stateflow", "--store", location, "doc", "put", "s", "k", '{"a": 1}'],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error[unsupported-store]: store location") and "postgresql://" in out.stderr
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(UnsupportedStore, match="holds URL options but no scheme"):
        open_store(str(tmp_path / location))
    assert list(tmp_path.iterdir()) == []


def test_a_libpq_keyword_string_as_the_store_is_refused_and_creates_no_file(tmp_path: Path) -> None:
    # libpq's other spelling of a connection was taken as a SQLite file path: a file named after
    # it was created and the location echoed, password and all
    keywords = "host=127.0.0.1 dbname=app user=postgres password='se cret'"
    refusal = (
        "error[unsupported-store]: store location 'host=127.0.0.1 dbname=app user=postgres password=***' "
        "is a libpq keyword string, not a file path: name a PostgreSQL store by its URL, "
        "postgresql://user@host:port/dbname (libpq options as ?name=value); a SQLite file of that "
        "name as ./NAME\n"
    )
    (tmp_path / "proj").mkdir()
    (tmp_path / "sf.toml").write_text(f'[store]\nurl = "{keywords}"\n')
    env = {k: v for k, v in os.environ.items() if k not in ("STATEFLOW_STORE", "STATEFLOW_CONFIG")}
    for args, extra in (
        (["--store", keywords, "tool", "patch_state", '{"global": {"strategy": {"a": 1}}}'], {}),
        (["doc", "put", "s", "k", '{"a": 1}'], {"STATEFLOW_STORE": keywords}),
        (["--config", "sf.toml", "tool", "read_state", '{"path": "global"}'], {}),
        (["--store", keywords, "setup", "claude-code", "--project", "proj"], {}),
    ):
        out = subprocess.run(
            ["stateflow", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**env, **extra},
        )
        assert (out.returncode, out.stderr) == (1, refusal), args
        assert "se cret" not in out.stdout + out.stderr
        assert sorted(p.name for p in tmp_path.rglob("*")) == ["proj", "sf.toml"], args
    with pytest.raises(UnsupportedStore, match="is a libpq keyword string"):
        open_store(keywords)
    # a file whose name starts like one is still a file, named as a path
    assert sf("--store", str(tmp_path / "host=x.db"), "doc", "put", "s", "k", "{}").returncode == 0


@pytest.mark.parametrize(
    ("keywords", "shown"),
    [
        ("sslrootcert=ca.pem host=db password=s3cret", "sslrootcert=ca.pem host=db password=***"),
        ("connect_timeout=5 host=db", "connect_timeout=5 host=db"),
        ("keepalives=1 sslpassword='s3 cret' dbname=app", "keepalives=1 sslpassword=*** dbname=app"),
        ("application=x host=db oauth_client_secret=s3cret", "application=x host=db oauth_client_secret=***"),
    ],
)
def test_any_libpq_keyword_string_is_refused_whatever_its_first_keyword(
    tmp_path: Path, keywords: str, shown: str
) -> None:
    # only a few first keywords were known: others were opened as a SQLite path, named unmasked
    env = {k: v for k, v in os.environ.items() if k not in ("STATEFLOW_STORE", "STATEFLOW_CONFIG")}
    for args, extra in (
        (["--store", keywords, "doc", "put", "s", "k", "{}"], {}),
        (["doc", "get", "s", "k"], {"STATEFLOW_STORE": keywords}),
    ):
        out = subprocess.run(
            ["stateflow", *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
            env={**env, **extra},
        )
        assert out.returncode == 1, args
        assert out.stderr.startswith(
            f"error[unsupported-store]: store location {shown!r} is a libpq keyword string, not a file path"
        ), out.stderr
        assert "s3" not in out.stdout + out.stderr
    assert list(tmp_path.iterdir()) == []
    # a relative file name holding an equals sign, no libpq keyword in it, is still a file
    put = ["stateflow", "--store", "notes=old.db", "doc", "put", "s", "k", "{}"]
    assert subprocess.run(put, capture_output=True, timeout=60, cwd=tmp_path, env=env).returncode == 0
    assert "notes=old.db" in [p.name for p in tmp_path.iterdir()]


def test_a_call_refused_for_its_arguments_alone_creates_no_store(tmp_path: Path) -> None:
    subject = ["--target-name", "bot", "--key", "t-1"]
    calls = {
        "declaration": ["states", "put", "tickets", "--data", "{}"],
        "payload": ["states", "attach", "tickets", "checklist", "--data", "{bad"],
        "meta": ["states", "merge", "tickets", *subject, "--data", "{}", "--meta", "{"],
        "scope": ["tool", "patch_state", '{"sesion": {"tactics": {"a": 1}}}'],
        "cwd": ["tool", "patch_state", '{"cwd": {"tactics": {"a": 1}}}', "--cwd", "/" + "x" * 600],
        "respond": ["respond", "hi", "--scopes", "global"],
        # refused by the service or the tool host, past the JSON decoding: the states service is
        # built first, and installs its built-ins when the call first uses the store
        "state tool": ["tool", "state_replace", '{"state": 5}'],
        "attach": ["states", "attach", "tickets", "checklist", "--data", '{"bogus": 1}'],
        "update-attachment": ["states", "update-attachment", "tickets", "labels", "--declarations", "[1]"],
        "template": ["state-templates", "put", "checklist", "--data", '{"x": 1}'],
    }
    for name, call in calls.items():
        store = tmp_path / f"{name}.db"
        refused = sf("--store", str(store), *call)
        assert refused.returncode == 1 and refused.stderr.startswith("error[invalid-"), (name, refused.stderr)
        assert list(tmp_path.iterdir()) == [], name  # no store file, no -writer beside it
    # the same calls with good arguments create the store they write
    ok = str(tmp_path / "ok.db")
    assert sf("--store", ok, "tool", "patch_state", '{"session": {"tactics": {"a": 1}}}').returncode == 0
    assert sf("--store", ok, "respond", "hi").returncode == 0
    template = '{"schema": {"type": "object", "properties": {"items": {"type": "array"}}}}'
    fresh = str(tmp_path / "fresh.db")  # a states write on a new store: its built-ins installed first
    assert sf("--store", fresh, "state-templates", "put", "checklist", "--data", template).returncode == 0
    assert [d["name"] for d in json.loads(sf("--store", fresh, "states", "list").stdout)] == ["memory"]


def test_a_state_or_subject_that_is_not_utf8_is_refused_and_creates_no_store(
    backend: str, open_migrated: StoreFactory, tmp_path: Path
) -> None:
    # an argument's byte that is not UTF-8 reaches Python as a lone surrogate, which no driver
    # can send: the key is refused where it is built, before a store is opened or created
    if backend.startswith("postgresql"):
        store = open_migrated()  # (the CLI does not migrate a PostgreSQL store)
        store.commit([Write.between(DocKey("n", "h"), None, {"a": 1})])
    bad = os.fsdecode(b"h\xff")
    for call, part in (
        (["doc", "put", "n", bad, "{}"], "subject"),
        (["doc", "patch", "n", bad, '{"a": 2}'], "subject"),
        (["doc", "get", "n", bad], "subject"),
        (["doc", "history", bad, "h"], "state name"),
    ):
        refused = sf("--store", backend, *call)
        assert (refused.returncode, refused.stdout) == (1, ""), call
        assert refused.stderr == (
            f"error[invalid-input]: a document key's {part} must be Unicode text: it holds a lone "
            "surrogate (such as a byte that is not UTF-8 in a command-line argument)\n"
        ), call
    if backend.startswith("postgresql"):
        assert [c.seq for c in store.history([DocKey("n", "h")])] == [1]  # nothing written
    else:
        assert list(tmp_path.iterdir()) == []  # no store file, no -writer beside it
    with pytest.raises(InvalidInput, match="subject must be Unicode text"):  # (the Python door)
        DocKey("n", "h\udcff")


def test_a_store_location_naming_a_folder_is_refused_and_creates_nothing(tmp_path: Path) -> None:
    (tmp_path / "existing").mkdir()
    for location, folder in (("./existing", "./existing"), ("./data/", "./data")):
        out = subprocess.run(
            ["stateflow", "--store", location, "doc", "put", "notes", "a", "{}"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=tmp_path,
        )
        assert (out.returncode, out.stderr) == (
            1,
            f"error[unsupported-store]: store location {location!r} names a folder; a SQLite store is a "
            f"file in it, e.g. {folder}/stateflow.db\n",
        )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["existing"]  # no file named data
    assert list((tmp_path / "existing").iterdir()) == []


@pytest.mark.parametrize(
    ("location", "shown", "reason"),
    [
        (
            "postgresql://me:pw@[bad/app?password=pw",
            "'postgresql://me:***@[bad/app?password=***'",
            "is not a valid URL",
        ),
        ("sqlite://[x", "'sqlite://[x'", "is not a valid URL"),
    ],
)
def test_a_malformed_store_url_is_refused_in_one_line(
    tmp_path: Path, location: str, shown: str, reason: str
) -> None:
    # an unbalanced IPv6 bracket or a connect_timeout psycopg cannot read once ended in a traceback
    out = subprocess.run(
        ["stateflow", "--store", location, "doc", "put", "notes", "a", "{}"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert out.returncode == 1
    assert out.stderr.startswith("error[unsupported-store]: ") and f"{shown} {reason}" in out.stderr
    assert out.stderr.count("\n") == 1 and "pw" not in out.stderr.replace("password", "")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("option", "refusal"),
    [
        ("mode=x", "PostgreSQL option mode must be ro (read-only) or rw"),
        *(
            (
                f"connect_timeout={value}",
                "PostgreSQL option connect_timeout must be a whole number of seconds (such as 5; 0: no "
                f"limit), not {value!r}",
            )
            for value in ("abc", "2.5")
        ),
    ],
)
def test_a_postgresql_option_of_the_wrong_form_is_refused_naming_what_it_takes(
    tmp_path: Path, option: str, refusal: str
) -> None:
    # connect_timeout=abc was refused in psycopg's words, naming neither the option's form nor a value
    # it takes; 2.5, which libpq cannot read, got as far as a connection attempt
    out = subprocess.run(
        ["stateflow", "--store", f"postgresql://me:pw@127.0.0.1:1/app?{option}", "doc", "get", "notes", "a"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert (out.returncode, out.stderr) == (1, f"error[unsupported-store]: {refusal}\n")
    with pytest.raises(UnsupportedStore) as refused:
        open_store(f"postgresql://me:pw@127.0.0.1:1/app?{option}")
    assert refused.value.message == refusal


def test_a_reserved_name_is_refused_for_what_it_is(db: str) -> None:
    catalog = sf("--store", db, "doc", "put", "_states", "x", "{}")
    assert catalog.returncode == 1 and catalog.stderr.startswith(
        "error[declared-state]: '_states' is a reserved catalog; its documents are written by `stateflow states`"
    )
    scratch = sf("--store", db, "doc", "patch", "_scratch", "x", "{}")
    assert (scratch.returncode, scratch.stderr) == (
        1,
        "error[declared-state]: '_scratch': state names starting with '_' are reserved for the store's own "
        "catalogs; pick another name (or pass --raw to write it anyway)\n",
    )
    assert sf("--store", db, "doc", "put", "_scratch", "x", "{}", "--raw").returncode == 0


def test_a_misspelt_command_gets_a_suggestion_whether_or_not_it_loads_lazily() -> None:
    for typo, meant in (("migrat", "migrate"), ("serv", "serve"), ("dum", "dump"), ("chek", "check")):
        out = sf(typo)
        assert out.returncode == 2 and f"No such command '{typo}'. Did you mean '{meant}'?" in out.stderr, (
            out.stderr
        )


DECLARATION = json.dumps(
    {
        "schema": {"type": "object", "properties": {"n": {"type": "integer"}}},
        "subject_kinds": ["thread"],
        "default_subject_kind": "thread",
    }
)


def test_file_dash_reads_stdin_and_every_file_option_says_so(db: str) -> None:
    # `--file -` was refused as a missing file, and --file had no help text anywhere
    assert sf("--store", db, "doc", "put", "notes", "a", "--file", "-", stdin='{"x": 1}').returncode == 0
    patched = sf("--store", db, "doc", "patch", "notes", "a", "--file", "-", stdin='{"y": 2}')
    assert patched.returncode == 0, patched.stderr
    assert json.loads(sf("--store", db, "doc", "get", "notes", "a").stdout) == {"x": 1, "y": 2}
    declared = sf("--store", db, "states", "put", "t", "--file", "-", stdin=DECLARATION)
    assert declared.returncode == 0, declared.stderr
    bad = sf("--store", db, "doc", "put", "notes", "b", "--file", "-", stdin="{")
    assert bad.returncode == 1 and bad.stderr.startswith("error[invalid-json]: --file - (stdin)"), bad.stderr
    for command, what in (
        (["doc", "put"], "BODY"),
        (["doc", "patch"], "PATCH"),
        (["tool"], "the arguments"),
        (["states", "put"], "the JSON payload"),
        (["states", "apply"], "the JSON payload"),
        (["state-templates", "put"], "the JSON payload"),
    ):
        shown = " ".join(sf(*command, "--help").stdout.split())
        assert f"--file FILE Read {what} from a file ('-': stdin)." in shown, command


def test_a_states_write_with_no_payload_at_a_terminal_is_a_usage_error(db: str) -> None:
    # with stdin a terminal and neither --data nor --file, the command waited silently for input
    import pty

    controller, terminal = pty.openpty()
    try:
        out = subprocess.run(
            ["stateflow", "--store", db, "states", "put", "tickets"],
            stdin=terminal,
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        os.close(terminal)
        os.close(controller)
    assert out.returncode == 2
    assert out.stderr.endswith(
        "Error: the payload is required: give --data JSON or --file PATH ('-' for either reads stdin), or pipe it in\n"
    ), out.stderr
    piped = sf("--store", db, "states", "put", "tickets", stdin=DECLARATION)
    assert piped.returncode == 0, piped.stderr  # stdin that is no terminal is still the payload


def test_a_file_that_is_not_a_store_is_named_so_not_called_damaged(tmp_path: Path) -> None:
    # a dump or any other file given as the store was reported as a damaged store, with advice
    # to restore it from a backup
    source = str(tmp_path / "real.db")
    assert sf("--store", source, "doc", "put", "notes", "a", '{"x": 1}').returncode == 0
    assert sf("--store", source, "dump", str(tmp_path / "store.jsonl")).returncode == 0
    (tmp_path / "notes.json").write_text('{"x": 1}\n')
    for name, hint in (
        ("store.jsonl", " (it is a stateflow dump: load it into a store with `stateflow load`)"),
        ("notes.json", ""),
    ):
        before = (tmp_path / name).read_bytes()
        for args in (["doc", "get", "notes", "a"], ["doc", "put", "notes", "a", "{}"], ["check"]):
            out = sf("--store", str(tmp_path / name), *args)
            assert (out.returncode, out.stderr) == (
                1,
                f"error[unsupported-store]: sqlite:///{tmp_path / name} is not a SQLite database, so not a stateflow "
                f"store; is the store location the right file?{hint}\n",
            ), args
        assert (tmp_path / name).read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("real.db")) == [
        "notes.json",
        "store.jsonl",
    ]
