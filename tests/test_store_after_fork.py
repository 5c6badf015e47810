"""A store used in a child after ``os.fork()`` (a pre-fork server, multiprocessing's ``fork``):
on SQLite both processes go on using it; on PostgreSQL the child is refused (its connections are
the parent's sockets) and told to open the store again, and the parent goes on — never a hang."""

from __future__ import annotations

import faulthandler
import os

from stateflow.errors import StoreUnavailable
from stateflow.store import DocKey, Write, open_store

PARENT, CHILD = DocKey("fork", "parent"), DocKey("fork", "child")


def test_a_store_opened_before_a_fork(backend: str) -> None:
    store = open_store(backend, auto_migrate=True)
    store.commit([Write.between(PARENT, None, {"n": 0}, expect=None)])
    store.get(PARENT)  # (connections in use before the fork: the pool holds them)
    postgres = not backend.endswith(".db")
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        status = 10
        try:
            faulthandler.dump_traceback_later(60, exit=True)  # (a hang ends the child, not the run)
            try:
                store.commit([Write.between(CHILD, None, {"n": 1}, expect=None)])
                status = 11 if postgres else 0
            except StoreUnavailable as refused:
                ok = postgres and "open the store again in the child" in str(refused)
                status = 0 if ok else 12
            if status == 0 and postgres:
                try:
                    store.get(PARENT)
                    status = 13
                except StoreUnavailable:
                    pass
                store.close()  # (its copy only: the parent's sessions are not ended)
                again = open_store(backend)
                again.commit([Write.between(CHILD, None, {"n": 1}, expect=None)])
                again.close()
        except BaseException:
            status = 14
        finally:
            os._exit(status)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert store.get(CHILD).body == {"n": 1}  # written by the child, read by the parent
    for n in range(1, 20):  # the parent's pooled connections still serve it
        doc = store.get(PARENT)
        store.commit([Write.between(PARENT, doc.body, {"n": n}, expect=doc.revision)])
    assert store.get(PARENT).body == {"n": 19}
    store.close()
