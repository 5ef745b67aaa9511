"""Provider credentials: the kinds and their fields, the request bodies, the shape shown.

Each kind is a Pydantic model of its fields; ``SECRET`` names the fields that are secret.
Those are stored only encrypted and never shown: an answer carries the non-secret fields and
``hint``, a masked form of the secret. The kinds and their fields are declared with their
providers, in nodes/provider_registry.py: adding a kind is done there.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from nodeloom.errors import FieldError, InvalidRequest
from nodeloom.nodes.provider_registry import BY_KIND, FIELD_TITLES, PROVIDERS, KindFields
from nodeloom.timestamps import Timestamp

HINT_MIN_LENGTH = 12  # a shorter secret shows no characters at all
HINT_TAIL = 4


class CredentialFieldOut(BaseModel):
    name: str
    title: str
    secret: bool = Field(description="Stored encrypted, never shown again (only the hint).")
    required: bool
    default: str | None = None
    placeholder: str | None = None
    description: str | None = None


class CredentialKindOut(BaseModel):
    kind: str
    title: str
    fields: list[CredentialFieldOut] = Field(description="In the order a form shows them.")
    testable: bool = Field(description="POST /credentials/{id}/test can try it.")
    node_types: list[str] = Field(description="The node types whose credential param takes it.")


def kind_out(kind: str, node_types: list[str]) -> CredentialKindOut:
    """How ``kind`` is filled in, from its model: every field, secret or not, required or
    with its default; and whether it has a connection test."""
    provider = BY_KIND[kind]
    model = provider.fields
    fields = [
        CredentialFieldOut(
            name=name,
            title=FIELD_TITLES.get(name, name),
            secret=name in model.SECRET,
            required=info.is_required(),
            default=info.default if isinstance(info.default, str) else None,
            placeholder=provider.placeholders.get(name),
            description=info.description,
        )
        for name, info in model.model_fields.items()
    ]
    return CredentialKindOut(
        kind=kind,
        title=provider.title,
        fields=fields,
        testable=provider.test is not None,
        node_types=node_types,
    )


# The kinds of credential this server stores, each one's fields model, from the providers'
# table (nodes/provider_registry.py), in its order.
KINDS: dict[str, type[KindFields]] = {p.kind: p.fields for p in PROVIDERS}


def hint(secret: dict[str, str]) -> str:
    """The secret masked: the last 4 characters (after the key's own prefix when it has
    one of 2-4 lowercase letters and a dash, as ``sk-…a1b2``) of a secret of at least 12
    characters; else only ``…``."""
    value = next(iter(secret.values()), "")
    if len(value) < HINT_MIN_LENGTH:
        return "…"
    head, dash, _ = value.partition("-")
    prefix = f"{head}-" if dash and re.fullmatch(r"[a-z]{2,4}", head) else ""
    return f"{prefix}…{value[-HINT_TAIL:]}"


def parse_fields(kind: str, fields: Any, pointer: str = "/fields") -> KindFields:
    """The fields of ``kind`` checked by its model, or InvalidRequest with a pointer per
    problem. Messages never quote what was sent (it may be a secret)."""
    model = KINDS.get(kind)
    if model is None:
        raise InvalidRequest(
            f"Unknown credential kind {kind!r}.",
            errors=[FieldError("/kind", f"kind must be one of: {', '.join(KINDS)}")],
        )
    if not isinstance(fields, dict):
        raise InvalidRequest(
            "fields must be an object.", errors=[FieldError(pointer, "fields must be an object")]
        )
    try:
        return model.model_validate(fields)
    except ValidationError as exc:
        problems = [
            FieldError(
                "/".join([pointer, *(str(p) for p in err["loc"])]),
                str(err["msg"]).removeprefix("Value error, "),
            )
            for err in exc.errors(include_input=False, include_url=False)
        ]
        raise InvalidRequest(
            f"The fields of this {kind} credential are invalid.", errors=problems
        ) from None


class CredentialCreate(BaseModel):
    model_config = ConfigDict(extra="ignore")

    name: str = Field(min_length=1, max_length=200)
    kind: str = Field(min_length=1, max_length=32, description=f"One of {', '.join(KINDS)}.")
    fields: dict[str, Any] = Field(
        repr=False,
        description="The kind's fields; the secret ones are stored encrypted, never returned.",
    )


class CredentialUpdate(BaseModel):
    """Only what is sent changes. ``fields`` replaces every field of the kind (send the
    non-secret ones again along with the new secret): that is how a secret is rotated."""

    model_config = ConfigDict(extra="ignore")

    name: str | None = Field(default=None, min_length=1, max_length=200)
    kind: str | None = Field(
        default=None,
        max_length=32,
        description="A credential's kind never changes: another kind than its own is refused "
        "(400); create a credential of that kind instead.",
    )
    fields: dict[str, Any] | None = Field(default=None, repr=False)


class CredentialOut(BaseModel):
    id: str
    name: str
    kind: str
    hint: str = Field(description="The secret, masked: sk-…a1b2 (or … for a short one).")
    fields: dict[str, Any] = Field(description="The non-secret fields (e.g. base_url).")
    created_at: Timestamp
    updated_at: Timestamp
    last_used_at: Timestamp | None


class CredentialTestResult(BaseModel):
    ok: bool
    status: int | None = Field(default=None, description="The provider's HTTP status, if any.")
    message: str


class ModelSchemaOut(BaseModel):
    """A hosted model's published schemas, for the editor's form of its input object."""

    model: str = Field(description="owner/name (Replicate) or the endpoint id (fal).")
    version: str | None = Field(
        description="The version described (the latest, or the one named); None for fal."
    )
    description: str | None = None
    input: dict[str, Any] = Field(
        description="JSON schema of the model's input object; `x-order` orders its fields."
    )
    output: dict[str, Any] | None = Field(description="JSON schema of its output, if published.")


def out(row: Any) -> CredentialOut:
    return CredentialOut(
        id=row.id,
        name=row.name,
        kind=row.kind,
        hint=row.hint,
        fields=dict(row.fields),
        created_at=row.created_at,
        updated_at=row.updated_at,
        last_used_at=row.last_used_at,
    )


def changed_fields(
    kind: str, stored: dict[str, Any], sent: dict[str, Any]
) -> tuple[dict[str, Any], dict[str, str] | None]:
    """The fields after a PATCH: non-secret ones sent replace the stored ones (``null``
    removes one); secret ones sent replace every stored secret (a rotation). (public fields,
    new secret fields or None to keep the stored secret.) The stored secret is never
    decrypted for this: when none is sent, the required ones are checked as present."""
    model = KINDS[kind]
    public = {**stored, **{k: v for k, v in sent.items() if k not in model.SECRET}}
    public = {k: v for k, v in public.items() if v is not None}
    secret = {k: v for k, v in sent.items() if k in model.SECRET and v is not None}
    if secret:
        parsed = parse_fields(kind, {**public, **secret})
        return parsed.public(), parsed.secret()
    kept = {
        name: "x" * HINT_MIN_LENGTH
        for name, info in model.model_fields.items()
        if name in model.SECRET and info.is_required()
    }
    return parse_fields(kind, {**public, **kept}).public(), None
