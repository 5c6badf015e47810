"""Open a store from a path or URL (the edges fold in ``--store`` and ``STATEFLOW_STORE``), else the default.

- ``postgresql://…`` / ``postgres://…`` → PostgreSQL (not migrated automatically: run
  ``stateflow migrate`` once, or pass ``auto_migrate=True``); ``?mode=ro`` makes every session
  read-only (``default_transaction_read_only``): the server itself refuses writes;
- ``sqlite:///path/to/file.db?synchronous=normal`` or a plain file path → SQLite, migrated
  automatically when opened to write (``create=True``, the default): a store opened by a command
  that only reads (``create=False``) is never upgraded in place — an older one answers
  ``store-not-migrated`` until ``stateflow migrate`` or a write upgrades it; ``?mode=ro`` opens
  it read-only (never created, migrated or written);
- nothing → ``stateflow.db`` in the user's data directory (platformdirs).

A plain path holding URL options (``?options=…`` without ``postgresql://``, ``x.db?mode=ro``)
is refused with ``unsupported-store``, not opened as a file of that name; so is a libpq keyword
string (``host=db dbname=app user=me``): PostgreSQL is named by a URL.
"""

from __future__ import annotations

import os
import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Final
from urllib.parse import SplitResult, parse_qs, parse_qsl, unquote, urlencode, urlsplit, urlunsplit

import platformdirs

from stateflow.errors import UnsupportedStore
from stateflow.extras import needs_extra

if TYPE_CHECKING:  # (the store classes import this module: a migrate command's advice)
    from stateflow.store.base import SqlStore

ENV_VAR = "STATEFLOW_STORE"

StoreLocation = str | os.PathLike[str]
"""Where a store is: a file path (``str`` or ``pathlib.Path``) or a URL."""


def default_store_path() -> Path:
    return Path(platformdirs.user_data_dir("stateflow", appauthor=False)) / "stateflow.db"


def resolve_store_url(store: StoreLocation | None = None) -> str:
    """The store location in effect: the argument, else the default file. ``$STATEFLOW_STORE``
    is read by the edges (the CLI's configuration, :func:`stateflow.connect`), never here."""
    return os.fspath(store) if store else str(default_store_path())


def absolute_location(store: StoreLocation, base: Path | None = None) -> str:
    """``store`` named so that it opens the same store from any working directory: a relative
    SQLite path made absolute against ``base`` (default: the working directory); a URL (absolute
    by its form) as given."""
    location = os.fspath(store)
    if "://" in location:
        return location
    refuse_keywords(location)  # (no path: made absolute, it would no longer look like one)
    path = Path(location).expanduser()
    return os.path.abspath(path if base is None else base / path)


_SECRET_PARAMS: Final = frozenset(
    {"password", "sslpassword", "oauth_client_secret", "scram_client_key", "scram_server_key"}
)
"""libpq parameters that carry a secret, in a URL's query or a keyword string (``passfile``
names a file, not a secret)"""


def display_location(store: StoreLocation | None = None, *, absolute: bool = False) -> str:
    """The store location as messages, listings and logs show it: a PostgreSQL password masked
    wherever the URL carries one (``user:***@``, ``?password=***``), anything else as given —
    or, ``absolute``, a SQLite path as the URL of its absolute path (``sqlite:////home/me/x.db``
    for ``./x.db``: the name a store gives itself, as messages name it, which opens the same
    file from any directory). The one rendering of a store location for people: whatever
    prints a location goes through here, so no door shows a secret another one hides."""
    url = resolve_store_url(store)
    if "://" not in url and is_keyword_string(url):
        return _SECRET_KEYWORD.sub(r"\1=***", url)
    if absolute and "://" not in url and _OPTIONS.search(url) is None:
        return f"sqlite:///{os.path.abspath(Path(url).expanduser())}"
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    try:
        parts = urlsplit(url)
    except ValueError:  # malformed (an unbalanced bracket): still shown, its password still hidden
        head, mark, query = url.partition("?")
        return _SECRET_USERINFO.sub(r"\1***@", head) + mark + _masked_query(query)
    cred, _, host = parts.netloc.rpartition("@")
    user, colon, password = cred.partition(":")
    netloc = f"{user}:***@{host}" if colon and password else parts.netloc
    return urlunsplit(parts._replace(netloc=netloc, query=_masked_query(parts.query)))


_SECRET_USERINFO: Final = re.compile(r"(://[^/@:]*:)[^/@]+@")
"""The password of a URL's ``user:password@`` (for a URL too malformed to split)"""


def store_command(shown: str, *args: str) -> tuple[str, str]:
    """``stateflow --store LOCATION ARGS`` for the store shown as ``shown`` (its
    :func:`display_location`), as a user can paste it into a POSIX shell — the location quoted (a
    masked ``***``, ``?`` or a SQLite path's spaces would not survive a shell unquoted), its
    masked password left out (libpq then reads ``PGPASSWORD`` or ``~/.pgpass``) and any other
    masked secret a ``<name>`` placeholder — and what to do about those, said after it."""
    location, notes = shown, []
    if shown.startswith(("postgresql://", "postgres://")) and "***" in shown:
        parts = urlsplit(shown)
        cred, at, host = parts.netloc.rpartition("@")
        user, _, password = cred.partition(":")
        dropped, filled, query = password == "***", False, []
        for piece in parts.query.split("&") if parts.query else ():
            name, _, value = piece.partition("=")
            secret = unquote(name) if value == "***" and unquote(name) in _SECRET_PARAMS else None
            if secret is None:
                query.append(piece)
            elif secret == "password":
                dropped = True
            else:
                query.append(f"{name}=<{secret}>")
                filled = True
        netloc = f"{user}{at}{host}" if password == "***" else parts.netloc
        location = urlunsplit(parts._replace(netloc=netloc, query="&".join(query)))
        if dropped:
            notes.append("its password left out: give it in PGPASSWORD or ~/.pgpass")
        if filled:
            notes.append("fill in each <name> with that secret")
    note = f" ({'; '.join(notes)})" if notes else ""
    return shlex.join(["stateflow", "--store", location, *args]), note


def split_location(url: str) -> SplitResult:
    """``url`` split into its parts, or refused (``unsupported-store``, named with its password
    masked) when it cannot be (``postgresql://[bad``: an unbalanced IPv6 bracket): the one way a
    store URL is taken apart, so a malformed one is a refusal, never a traceback."""
    try:
        return urlsplit(url)
    except ValueError as exc:
        raise UnsupportedStore(
            f"store location {display_location(url)!r} is not a valid URL: {exc}"
        ) from None


def holds_secret(store: StoreLocation) -> bool:
    """Whether ``store`` carries a PostgreSQL password: exactly what :func:`display_location`
    masks, so the two never disagree on what a secret is."""
    return display_location(store) != resolve_store_url(store)


def _masked_query(query: str) -> str:
    """``query`` with the values of secret parameters masked, the rest kept as written."""
    return "&".join(
        f"{name}=***" if unquote(name) in _SECRET_PARAMS else piece
        for piece in query.split("&")
        for name in [piece.partition("=")[0]]
    )


def open_store(
    store: StoreLocation | None = None,
    *,
    auto_migrate: bool | None = None,
    create: bool = True,
    wait_seconds: float | None = None,
    connect_timeout: float | None = None,
    statement_timeout: float | None = None,
) -> SqlStore:
    """Open the store at ``store`` (path or URL; see the module docs). ``create=False`` (what
    commands that only read pass) refuses a missing SQLite file instead of creating it, and
    does not upgrade an older one (``auto_migrate`` unset: a SQLite store is migrated on open
    only when opened to write).
    ``wait_seconds`` bounds a call's wait for the store: on PostgreSQL for a connection during an
    outage (default 10 s), on SQLite a writer's wait for its turn at the write lock (default
    30 s). PostgreSQL: ``connect_timeout`` bounds one connection attempt (default 5 s; a URL's
    own ``connect_timeout`` wins),
    ``statement_timeout`` one statement (default 60 s, 0: none; ``store-timeout``; a URL's own
    ``statement_timeout`` option wins)."""
    url = resolve_store_url(store)
    if url.startswith(("postgresql://", "postgres://")):
        with needs_extra("postgres", "a PostgreSQL store"):
            from stateflow.store.postgres import PostgresStore

        url, read_only = pg_mode(url)
        return PostgresStore(
            url,
            auto_migrate=bool(auto_migrate),
            timeout=wait_seconds,
            connect_timeout=connect_timeout,
            statement_timeout=statement_timeout,
            read_only=read_only,
        )
    from stateflow.store.sqlite import DEFAULT_BUSY_TIMEOUT_MS, SqliteStore

    path, synchronous, read_only = _sqlite_location(url)
    return SqliteStore(
        path,
        synchronous=synchronous,
        busy_timeout_ms=DEFAULT_BUSY_TIMEOUT_MS if wait_seconds is None else round(wait_seconds * 1000),
        auto_migrate=create if auto_migrate is None else auto_migrate,
        create=create,
        read_only=read_only,
    )


def sqlite_file(store: StoreLocation | None = None) -> Path | None:
    """The file of the SQLite store at ``store`` (None for PostgreSQL), read by the rules
    :func:`open_store` follows."""
    url = resolve_store_url(store)
    if url.startswith(("postgresql://", "postgres://")):
        return None
    return Path(_sqlite_location(url)[0]).expanduser()


def _sqlite_location(url: str) -> tuple[str, str, bool]:
    """A SQLite location's file path, ``synchronous`` setting and read-only flag."""
    synchronous = "full"
    read_only = False
    path = url
    if "://" in url:
        parts = split_location(url)
        if parts.scheme != "sqlite":
            raise UnsupportedStore(
                f"unsupported store {display_location(url)!r}: use a file path, sqlite:///path or postgresql://…"
            )
        path = unquote(parts.path)
        if path.startswith("//"):  # sqlite:////abs/path, the form the store names itself by
            path = "/" + path.lstrip("/")
        if parts.netloc:
            raise UnsupportedStore(f"sqlite URL {url!r} must look like sqlite:///absolute/path")
        query = parse_qs(parts.query)
        unknown = set(query) - {"synchronous", "mode"}
        if unknown:
            raise UnsupportedStore(f"unknown sqlite option(s) {sorted(unknown)}; known: synchronous, mode")
        if "synchronous" in query:
            synchronous = query["synchronous"][-1]
        if "mode" in query:
            if query["mode"][-1] not in ("ro", "rw"):
                raise UnsupportedStore("sqlite option mode must be ro (read-only) or rw")
            read_only = query["mode"][-1] == "ro"
    if not path:
        raise UnsupportedStore("empty store path")
    if "://" not in url:
        refuse_query_path(path)
        refuse_keywords(path)
    if path.endswith("/") or os.path.isdir(os.path.expanduser(path)):
        # a folder: SQLite cannot open it, and a trailing slash would create a file of its name
        raise UnsupportedStore(
            f"store location {path!r} names a folder; a SQLite store is a file in it, e.g. "
            f"{path.rstrip('/')}/stateflow.db"
        )
    return path, synchronous, read_only


_OPTIONS: Final = re.compile(r"\?[A-Za-z_][A-Za-z0-9_.-]*=")


def refuse_query_path(path: str) -> None:
    """Refuse a plain path that holds URL options (``?options=…``, ``x.db?mode=ro``): options
    belong to a URL (``postgresql://…?options=…``, ``sqlite:///path?mode=ro``), and opening the
    path as given would create a SQLite file named after them."""
    if _OPTIONS.search(path) is not None:
        head, _, query = path.partition("?")
        raise UnsupportedStore(
            f"store location {head + '?' + _masked_query(query)!r} holds URL options but no scheme; give a URL: "
            "postgresql://user@host/db?options=… for PostgreSQL, sqlite:///path/to/file.db?mode=ro "
            "for SQLite options"
        )


# fmt: off
LIBPQ_KEYWORDS: Final = frozenset({
    "host", "hostaddr", "port", "dbname", "user", "password", "passfile", "require_auth",
    "channel_binding", "connect_timeout", "client_encoding", "options", "application_name",
    "fallback_application_name", "keepalives", "keepalives_idle", "keepalives_interval",
    "keepalives_count", "tcp_user_timeout", "replication", "gssencmode", "sslmode", "requiressl",
    "sslnegotiation", "sslcompression", "sslcert", "sslkey", "sslpassword", "sslcertmode",
    "sslrootcert", "sslcrl", "sslcrldir", "sslsni", "sslkeylogfile", "requirepeer",
    "ssl_min_protocol_version", "ssl_max_protocol_version", "min_protocol_version",
    "max_protocol_version", "krbsrvname", "gsslib", "gssdelegation", "service",
    "target_session_attrs", "load_balance_hosts", "oauth_issuer", "oauth_client_id",
    "oauth_client_secret", "oauth_scope", "scram_client_key", "scram_server_key",
})
# fmt: on
"""libpq's documented connection keywords (PostgreSQL 18, "Parameter Key Words"): a location
holding one as ``keyword=value`` is libpq's keyword/value connection string, whichever comes
first (``sslrootcert=ca.pem host=db``, ``connect_timeout=5 host=db``)."""
_PAIR: Final = r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(?:'(?:[^'\\]|\\.)*'|[^\s']*)"
_FIRST_PAIR: Final = re.compile(_PAIR)
_PAIRS: Final = re.compile(rf"(?:{_PAIR})+\s*")
_SECRET_KEYWORD: Final = re.compile(
    rf"\b({'|'.join(sorted(_SECRET_PARAMS))})\s*=\s*(?:'(?:[^'\\]|\\.)*'|\S*)"
)
"""A secret's ``keyword=value`` in such a string (a value may be quoted)."""


def is_keyword_string(location: str) -> bool:
    """Whether ``location`` is a libpq keyword/value string: it starts with a libpq keyword's
    ``keyword=``, or is wholly ``keyword=value`` pairs one of which is libpq's (a relative file
    name such as ``notes=old.db`` is neither)."""
    first = _FIRST_PAIR.match(location)
    if first is None:
        return False
    if first.group(1) in LIBPQ_KEYWORDS:
        return True
    whole = _PAIRS.fullmatch(location)
    return whole is not None and any(m.group(1) in LIBPQ_KEYWORDS for m in _FIRST_PAIR.finditer(location))


def refuse_keywords(path: str) -> None:
    """Refuse a libpq keyword string given as the store (``host=db dbname=app user=me``): opened
    as given it would create a SQLite file of that name. Named with its password masked."""
    if is_keyword_string(path):
        raise UnsupportedStore(
            f"store location {display_location(path)!r} is a libpq keyword string, not a file path: "
            "name a PostgreSQL store by its URL, postgresql://user@host:port/dbname (libpq options "
            "as ?name=value); a SQLite file of that name as ./NAME"
        )


def pg_mode(url: str) -> tuple[str, bool]:
    """The URL without our ``mode`` option (libpq does not know it), and whether it asked for
    read-only sessions."""
    parts = split_location(url)
    query = parse_qsl(parts.query, keep_blank_values=True)
    modes = [value for name, value in query if name == "mode"]
    if not modes:
        return url, False
    if modes[-1] not in ("ro", "rw"):
        raise UnsupportedStore("PostgreSQL option mode must be ro (read-only) or rw")
    kept = urlencode([(name, value) for name, value in query if name != "mode"])
    return urlunsplit(parts._replace(query=kept)), modes[-1] == "ro"
