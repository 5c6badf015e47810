"""``StatesAPI``: the declared-states calls every door offers, in one typed Protocol.

Both the local :class:`~stateflow.states.service.StatesService` and the HTTP client
:class:`stateflow.client.StatesClient` satisfy it (mypy checks both against it), so code written
against ``StatesAPI`` — the ``stateflow states`` commands, for one — runs unchanged on a store
or on a server. Door context (door, actor) is the caller's identity: the local service takes it
from :meth:`StatesService.acting_as`, a server from the bearer token.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from stateflow.states.results import (
        ApplyResult,
        Attached,
        AttachmentUpdated,
        Consumer,
        DeclarationView,
        Deleted,
        Detached,
        Diff,
        Erased,
        FoldReport,
        JqInput,
        JqUpdate,
        PruneReport,
        Record,
        SearchPage,
        StateAttachment,
        Stats,
        SubjectsPage,
        Template,
        TemplateRow,
        WritesPage,
    )
    from stateflow.states.service import Expect

Json = dict[str, Any]


class StatesAPI(Protocol):
    # catalog
    def list_declarations(self) -> list[DeclarationView]: ...
    def get_declaration(self, name: str, /) -> DeclarationView: ...
    def declare(self, name: str, raw: Any, /, *, replace: bool = True) -> DeclarationView: ...
    def delete_declaration(self, name: str, /) -> Deleted: ...
    def stats(self, name: str, /) -> Stats: ...
    def consumers(self, name: str, /) -> list[Consumer]: ...

    # listings
    def subjects(
        self, name: str, /, *, kind: str | None = None, limit: Any = None, cursor: str | None = None
    ) -> SubjectsPage: ...
    def search(
        self,
        name: str,
        filters: Any,
        /,
        *,
        limit: Any = None,
        cursor: str | None = None,
        sort: Any = None,
        include_data: bool = False,
    ) -> SearchPage: ...

    # records
    def read(
        self, name: str, subject: Any, /, *, revision: int | None = None, seq: int | None = None
    ) -> Record | None: ...
    def replace(
        self,
        name: str,
        subject: Any,
        document: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record: ...
    def merge(
        self,
        name: str,
        subject: Any,
        patch: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record: ...
    def apply(
        self,
        name: str,
        subject: Any,
        ops: Any,
        /,
        *,
        op_id: str | None = None,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> ApplyResult: ...
    def erase(
        self, name: str, subject: Any, /, *, origin: Any = None, expect_revision: Expect = None
    ) -> Erased: ...
    def fold(
        self,
        name: str,
        subject: Any,
        into: Any,
        mode: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> FoldReport: ...
    def writes(
        self, name: str, subject: Any, /, *, limit: Any = None, cursor: str | None = None
    ) -> WritesPage: ...
    def diff(self, name: str, subject: Any, from_revision: Any, to_revision: Any = None, /) -> Diff: ...
    def revert(
        self,
        name: str,
        subject: Any,
        revision: Any,
        /,
        *,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> Record | None: ...

    # retention
    def prune(self) -> PruneReport: ...

    # templates and attachments
    def list_templates(self) -> list[TemplateRow]: ...
    def get_template(self, name: str, /) -> Template: ...
    def put_template(self, name: str, raw: Any, /, *, replace: bool = False) -> Template: ...
    def delete_template(self, name: str, /) -> Deleted: ...
    def attachments(self, name: str, /) -> list[StateAttachment]: ...
    def get_attachment(self, name: str, template: str, /) -> StateAttachment: ...
    def attach(self, name: str, template: str, body: Any, /) -> Attached: ...
    def update_attachment(self, name: str, template: str, body: Any, /) -> AttachmentUpdated: ...
    def detach(self, name: str, template: str, /) -> Detached: ...
    def template_jq_input(
        self, name: str, subject: Any, reference: str, params: dict[str, Any], /
    ) -> JqInput: ...
    def template_jq_update(
        self,
        name: str,
        subject: Any,
        reference: str,
        input_value: Any = None,
        /,
        *,
        op_id: str | None = None,
        origin: Any = None,
        expect_revision: Expect = None,
    ) -> JqUpdate: ...
