"""The declared-states contract models. Every model refuses unknown keys."""

from __future__ import annotations

import functools
import re
from typing import Any, Final, Literal

import orjson
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from stateflow.doc.canonical import check, utf8_text
from stateflow.subjects import Subject, encode_subject

NAME_RE: Final = re.compile(r"[a-z0-9][a-z0-9_-]*\Z")
KIND_RE: Final = re.compile(r"[a-z][a-z0-9_-]{0,62}\Z")
KEY_MAX_CHARS: Final = 512
NAME_MAX_CHARS: Final = 128
TARGET_NAME_MAX_CHARS: Final = 256
SUBJECT_MAX_BYTES: Final = 2400
"""The bounds of the texts a PostgreSQL unique index holds whole (an index entry is at most
2,704 bytes, however a row may be compressed), enforced alike on every backend: a state's name
(every record's key leads with it), a subject's encoding beside it (``[target_kind,
target_name, kind, key]`` as JSON, UTF-8: room for a key of 512 characters of any text beside a
short target name), and the target name, which the op-id ledger keeps beside an ``op_id``."""
MAX_RETENTION_DAYS: Final = 2_147_483_647
EXEMPT_WITH_DAYS: Final = (
    "retention_exempt and retention_days contradict each other: an exempt state's records are "
    "trimmed by the code that writes them, never by age (declare retention_exempt: false to "
    "let the sweep erase them)"
)
META_MAX_BYTES: Final = 4096
ORIGIN_TEXT_MAX_CHARS: Final = 256
"""The bound on an origin's ``consumer`` and ``run_id`` and on a write's ``op_id``: every audit
row carries the first two (and every ``writes`` page serves them), the ledger keeps the op id
for retention's span; bounded as ``meta`` is, so no writer can bloat what others read."""
DOORS: Final = ("api", "operator", "tool", "conversation", "hook", "schedule", "studio")
TargetKind = Literal["agent", "tool"]
RecordRuleName = Literal["langgraph_item"]
"""The rules beyond its schema a declaration may name for its records (``record_rule``; what
each checks: ``stateflow.states.builtin.RULES``)."""
Door = Literal["api", "operator", "tool", "conversation", "hook", "schedule", "studio"]


def renamed(raw: dict[str, Any], name: str, what: str) -> str | None:
    """Why a document naming another ``what`` than the ``name`` it is put under (the URL's, the
    argument's: the one stored) is refused, or None (no ``name``, or the same one): storing it
    under the other name would silently drop what it says."""
    if "name" not in raw or raw["name"] == name:
        return None
    return (
        f"the document's name {raw['name']!r} differs from the {what} name {name!r} it is put "
        "under: drop the document's name or make the two equal"
    )


def origin_text_problem(name: str, value: str) -> str | None:
    """Why ``value`` cannot be the origin's ``name`` (``consumer``, ``run_id``, ``op_id``), or None:
    the one length rule of every door (the service, HTTP headers, the CLI, tools)."""
    if len(value) > ORIGIN_TEXT_MAX_CHARS:
        return f"{name} is {len(value)} characters; the limit is {ORIGIN_TEXT_MAX_CHARS}"
    return None


def op_id_problem(op_id: object, name: str = "op_id") -> str | None:
    """Why ``op_id`` cannot name a write (the ledger's key of a retry), or None. One holding a
    lone surrogate (a byte that is not UTF-8 in a command-line argument) raises
    :class:`~stateflow.errors.InvalidJSON` at ``name``, as such a string is refused anywhere:
    the ledger, which keeps it as text, would fail on it with a raw encoding error."""
    if not isinstance(op_id, str) or not op_id:
        return "op_id must be a non-empty string"
    if "\x00" in op_id:  # the ledger keeps it as text, and a PostgreSQL text cannot hold NUL
        return "op_id must not contain U+0000 (NUL)"
    if not utf8_text(op_id):
        check(op_id, name)
    return origin_text_problem("op_id", op_id)


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)


_ADVERTISED: Final[dict[str, dict[str, Any]]] = {
    "target_name": {"maxLength": TARGET_NAME_MAX_CHARS},
    "kind": {"pattern": "^[a-z][a-z0-9_-]{0,62}$", "maxLength": 63},
    "key": {
        "minLength": 1,
        "maxLength": KEY_MAX_CHARS,
        "description": f"trimmed of surrounding white space: 1-{KEY_MAX_CHARS} characters after",
    },
}
"""The bounds the validators below hold a subject's texts to, as JSON Schema: its schema
advertises them (the tools' input schemas and the OpenAPI take theirs from it), while the
refusals stay the validators' own (a key is bounded after trimming)."""


class StateSubject(_Model):
    """``{target_kind, target_name, kind, key}``; ``(target_kind, target_name)`` is the tenant."""

    target_kind: TargetKind
    target_name: str = Field(min_length=1, json_schema_extra=_ADVERTISED["target_name"])
    kind: str = Field(json_schema_extra=_ADVERTISED["kind"])
    key: str = Field(json_schema_extra=_ADVERTISED["key"])

    @field_validator("kind")
    @classmethod
    def _kind(cls, v: str) -> str:
        if not KIND_RE.match(v):
            raise ValueError("kind must match ^[a-z][a-z0-9_-]{0,62}$")
        return v

    @field_validator("key")
    @classmethod
    def _key(cls, v: str) -> str:
        v = v.strip()
        if not v:
            raise ValueError("subject key must be non-blank")
        if not utf8_text(v):
            raise ValueError(
                "subject key must be Unicode text: it holds a lone surrogate (such as a byte that "
                "is not UTF-8 in a command-line argument)"
            )
        if len(v) > KEY_MAX_CHARS:
            raise ValueError(f"subject key must be at most {KEY_MAX_CHARS} characters after trimming")
        return v

    @field_validator("target_name")
    @classmethod
    def _target_name(cls, v: str) -> str:
        if len(v) > TARGET_NAME_MAX_CHARS:
            raise ValueError(f"target_name must be at most {TARGET_NAME_MAX_CHARS} characters")
        return v

    @model_validator(mode="after")
    def _encoded_size(self) -> StateSubject:
        # (a JSON string is at most 6 bytes a character: most subjects need no encoding here)
        if 6 * (len(self.target_name) + len(self.key)) + 100 > SUBJECT_MAX_BYTES:
            size = len(self.encode().encode("utf-8", "surrogatepass"))
            if size > SUBJECT_MAX_BYTES:
                raise ValueError(
                    f"the subject is {size} bytes encoded ([target_kind, target_name, kind, key] as "
                    f"JSON, UTF-8); the limit is {SUBJECT_MAX_BYTES}: shorten its key or target_name"
                )
        return self

    @property
    def tenant(self) -> tuple[str, str]:
        return (self.target_kind, self.target_name)

    def encode(self) -> str:
        return encode_subject(self.target_kind, self.target_name, self.kind, self.key)

    @staticmethod
    @functools.lru_cache(maxsize=4096)
    def decode(text: str) -> StateSubject:
        """The subject a stored key names, as it is stored: one the model now refuses (written
        before a rule it breaks was enforced, such as a longer target name) is read, not a
        failure of every listing, check or sweep that meets it. Subjects repeat across writes and
        the model is frozen, so each distinct one is validated once and shared."""
        s = Subject.decode(text)
        try:
            return StateSubject(target_kind=s.target_kind, target_name=s.target_name, kind=s.kind, key=s.key)  # type: ignore[arg-type]
        except ValidationError:
            return StateSubject.model_construct(
                target_kind=s.target_kind, target_name=s.target_name, kind=s.kind, key=s.key
            )


@functools.cache
def subject_schema_properties() -> dict[str, dict[str, Any]]:
    """The JSON Schema of each member of a subject, from :class:`StateSubject` (titles left out):
    what every published schema naming a subject's parts carries, so none advertises less than
    the model refuses."""
    properties = StateSubject.model_json_schema()["properties"]
    return {name: {k: v for k, v in schema.items() if k != "title"} for name, schema in properties.items()}


class Declaration(_Model):
    name: str = ""
    description: str = ""
    schema_: dict[str, Any] = Field(default_factory=dict, alias="schema")
    subject_kinds: list[str] = Field(min_length=1)
    default_subject_kind: str
    retention_days: int | None = Field(default=None, gt=0, le=MAX_RETENTION_DAYS)
    # records trimmed by the code that writes them (they hold values for each other): never
    # erased by the sweep by age; None: as declared before (a re-declare keeps it)
    retention_exempt: bool | None = None
    # a rule of the platform's its records keep beside the schema (the LangGraph store's items
    # must read back as items, whatever the state's name); None: as declared before
    record_rule: RecordRuleName | None = None
    effective_schema: dict[str, Any] | None = None
    regimes: list[dict[str, Any]] | None = None
    updated_at: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if v and not NAME_RE.match(v):
            raise ValueError("name must match ^[a-z0-9][a-z0-9_-]*$")
        if len(v) > NAME_MAX_CHARS:
            raise ValueError(f"name is {len(v)} characters; the limit is {NAME_MAX_CHARS}")
        return v

    @field_validator("subject_kinds")
    @classmethod
    def _kinds(cls, v: list[str]) -> list[str]:
        for kind in v:
            if not KIND_RE.match(kind):
                raise ValueError(f"subject kind {kind!r} must match ^[a-z][a-z0-9_-]{{0,62}}$")
        if len(set(v)) != len(v):
            raise ValueError("subject_kinds must be unique")
        return v

    @field_validator("retention_days", mode="before")
    @classmethod
    def _retention(cls, v: Any) -> Any:
        # (a JSON integer only: the model's lax reading would take true, and "7" or " 7 ")
        if isinstance(v, bool | str):
            raise ValueError("retention_days must be an integer")
        return v

    @field_validator("retention_exempt", mode="before")
    @classmethod
    def _exempt(cls, v: Any) -> Any:
        if v is not None and not isinstance(v, bool):
            raise ValueError("retention_exempt must be true or false")
        return v

    @model_validator(mode="after")
    def _default_kind(self) -> Declaration:
        if self.default_subject_kind not in self.subject_kinds:
            raise ValueError(
                f"default_subject_kind {self.default_subject_kind!r} must be one of subject_kinds {self.subject_kinds}"
            )
        if self.retention_exempt and self.retention_days:
            raise ValueError(EXEMPT_WITH_DAYS)
        return self

    def stored(self) -> dict[str, Any]:
        """What the catalog keeps (computed fields are never stored)."""
        return {
            "name": self.name,
            "description": self.description,
            "schema": self.schema_,
            "subject_kinds": list(self.subject_kinds),
            "default_subject_kind": self.default_subject_kind,
            "retention_days": self.retention_days,
            "retention_exempt": bool(self.retention_exempt),
            # (only when named: the declarations of states without one stay as they were)
            **({"record_rule": self.record_rule} if self.record_rule is not None else {}),
        }


class WriteOrigin(_Model):
    """The consumer half of a write's origin; door, actor and ids are stamped by the platform."""

    consumer: str | None = None
    meta: dict[str, Any] | None = None
    run_id: str | None = None
    op_id: str | None = None

    @field_validator("consumer", "run_id", "op_id")
    @classmethod
    def _text(cls, v: str | None, info: ValidationInfo) -> str | None:
        why = None if v is None else origin_text_problem(info.field_name or "", v)
        if why is not None:
            raise ValueError(why)
        return v

    @field_validator("meta")
    @classmethod
    def _meta(cls, v: dict[str, Any] | None) -> dict[str, Any] | None:
        if v is not None:
            # checked first, as the origin is when it is stored: orjson refuses a lone surrogate
            # or an integer beyond 64 bits with a bare TypeError
            check(v, "origin.meta")
            size = len(orjson.dumps(v))
            if size > META_MAX_BYTES:
                raise ValueError(f"origin meta is {size} bytes serialized; the limit is {META_MAX_BYTES}")
        return v


class DoorContext(_Model):
    """The ambient context an entering door deposits; never supplied by the writer."""

    door: Door = "api"
    actor: str | None = None
    turn_id: str | None = None
    inbound_id: str | None = None
    target_kind: TargetKind | None = None
    target_name: str | None = None
    candidates: dict[str, str] = Field(default_factory=dict)
    """Subject keys in scope by kind (e.g. ``{"thread": "t-1"}``) for subject resolution."""
