"""What a node type is: a declaration (``NodeSpec``, plain data) plus one async ``run``.

The executor validates params against ``spec.params`` (a pydantic model), gathers the input
artifacts named by the graph's edges and calls ``run``. A node returns ``Produced``: the bytes
(or a file) of exactly one artifact of its declared output kind, with media metadata.
Cost is part of the declaration so the estimate and the charge come from one place.
"""

from __future__ import annotations

import builtins
import math
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

from pydantic import BaseModel, ConfigDict

from nodeloom.settings import Settings


class Kind(StrEnum):
    """What an artifact is: each kind has one content type (``CONTENT_TYPES``)."""

    TEXT = "text"
    IMAGE = "image"
    AUDIO = "audio"
    VIDEO = "video"
    # A JSON document, carried as text (downloaded as text/plain): a node declaring a json
    # output has its output checked to be JSON (engine/executor.py), and a json output may
    # feed any text input (``accepts``), since JSON is text.
    JSON = "json"


CONTENT_TYPES: dict[Kind, str] = {
    Kind.TEXT: "text/plain",
    Kind.IMAGE: "image/png",
    Kind.AUDIO: "audio/mpeg",
    Kind.VIDEO: "video/mp4",
    Kind.JSON: "text/plain",
}

# The output every node has, besides its own: when an edge leaves it, a failure of the node
# sends its error ({code, message, node_id}, as JSON) down that edge instead of failing the
# run (engine/run_state.py).
ERROR_OUTPUT = "error"
# The name of a node's one output when it has no branches.
DEFAULT_OUTPUT = "output"


def accepts(input_kind: Kind, output_kind: Kind) -> bool:
    """May an output of ``output_kind`` feed an input of ``input_kind``? The same kind, or
    JSON into text (JSON is text). Text into a json input is refused: it is not known to
    be JSON before the run; a ``ParseJson`` in between checks it."""
    return input_kind == output_kind or (input_kind == Kind.TEXT and output_kind == Kind.JSON)


@dataclass(frozen=True)
class Input:
    """A named input of a node. ``multiple``: several edges may feed it; the node then gets
    a list of artifacts, in edge order. An input that is not ``required`` may be None."""

    name: str
    kind: Kind
    required: bool = True
    multiple: bool = False  # several edges allowed; values arrive in edge order


@dataclass(frozen=True)
class Output:
    """The one artifact a node produces, of this kind."""

    kind: Kind

    @property
    def content_type(self) -> str:
        return CONTENT_TYPES[self.kind]


@dataclass(frozen=True)
class Cost:
    """The price of one execution in credits, held before it runs and charged when it
    completes; ``per_second`` adds credits per started second of an audio or video output
    (estimated from the ``max_seconds`` param); ``pass_through`` adds what the provider
    reports it cost, up to that many credits (held in full)."""

    credits: int
    per_second: int = 0  # for media with a length: per started second of output
    # Pass-through of the provider's reported cost (``Produced.provider_cost_usd``, at
    # ``provider_credits_per_usd`` plus ``provider_cost_markup``): the most held for it.
    pass_through: int = 0


class Params(BaseModel):
    """Base of every params model. React Flow keeps UI fields (``label``...) in ``data``
    beside the params, so unknown fields are ignored rather than refused."""

    model_config = ConfigDict(extra="ignore", frozen=True)


@dataclass(frozen=True)
class NodeSpec:
    """The declaration of a node type, plain data: what the catalog, the editor, the graph
    checks and the price come from. ``version`` is part of the output cache key: raise it
    when the same params and inputs would give another output. A package's node keeps
    ``sandboxed`` true and sets none of the provider or run-input flags."""

    type: str
    version: int
    category: str
    title: str
    description: str
    inputs: tuple[Input, ...]
    output: Output
    params: builtins.type[Params]
    cost: Cost
    needs_provider: bool = False  # calls the configured OpenAI-compatible provider
    # Calls the provider when one is configured and works locally otherwise (speech).
    optional_provider: bool = False
    # The output cache may reuse an earlier result (false for nodes whose point is a side
    # effect or whose answer changes with time, like Delay or an HTTP request).
    cacheable: bool = True
    # The output depends on the run's input data, so the cache key must include what the
    # node reads of it (``NodeType.run_input_read``).
    uses_run_input: bool = False
    # Runs in a sandbox process under a time and memory budget (see nodeloom.sandbox). Only
    # nodes that compute nothing may run on the server's event loop.
    sandboxed: bool = True
    # Waits on a remote provider (nodes/adapters): runs on the event loop whatever the size of
    # its inputs, holds no execution slot while it waits, and sends its CPU work (decoding
    # what the provider returned) to a sandbox process through its context. Not sandboxed;
    # or sandboxed too when only some of its runs call a provider (TextToSpeech speaks
    # locally without one): ``NodeType.waits_on_provider`` then says which.
    adapter: bool = False
    # The kinds of account credential its ``credential`` param may name. (A sandboxed node
    # that takes several learns which one it got from ``ctx.credential_kind``, a provider
    # adapter from ``ctx.credential.kind``.)
    credential_kinds: tuple[str, ...] = ("openai",)
    # Named outputs that each carry the node's one artifact, of which an execution takes
    # some (an If's ``true`` and ``false``): edges from the others lead to nodes that are
    # then skipped. Empty: the one output ``output``.
    branches: tuple[str, ...] = ()
    # The param whose entries add outputs of their own (a Switch's ``cases``), if any.
    branches_from_param: str | None = None

    @property
    def calls_provider(self) -> bool:
        return self.needs_provider or self.optional_provider

    def input(self, name: str) -> Input | None:
        for item in self.inputs:
            if item.name == name:
                return item
        return None


def spec_family(category: str, output: Kind, cost: Cost) -> Callable[..., NodeSpec]:
    """A NodeSpec maker for the types of one module that share category, output kind and
    price: ``make(type, title, description, params, *inputs)``."""

    def make(
        type_: str, title: str, description: str, params: builtins.type[Params], *inputs: Input
    ) -> NodeSpec:
        return NodeSpec(
            type=type_,
            version=1,
            category=category,
            title=title,
            description=description,
            inputs=inputs,
            output=Output(output),
            params=params,
            cost=cost,
        )

    return make


@dataclass(frozen=True)
class ArtifactRef:
    """A completed artifact handed to a node as an input value.

    A small text artifact is kept in the database, not as a file: its bytes come as ``data``,
    and ``path`` is where they are written only for a node run in a sandbox process. Read
    an input with ``read_bytes``/``read_text``; ``path`` is for media, which are files."""

    artifact_id: str
    content_type: str
    sha256: str
    size_bytes: int
    path: Path
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    data: bytes | None = None

    def read_bytes(self) -> bytes:
        return self.data if self.data is not None else self.path.read_bytes()

    def read_text(self) -> str:
        return self.read_bytes().decode("utf-8")


@dataclass(frozen=True)
class StoredMedia:
    """A file already in the artifact store (an asset, an earlier artifact), as a media
    input node finds it (``find_media`` of the executor's context)."""

    sha256: str
    size_bytes: int
    content_type: str
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None


@dataclass
class Produced:
    """One artifact: either ``data`` in memory, a finished file at ``path`` (moved, not
    copied, into the artifact store), or a blob already ``stored`` (a media input)."""

    data: bytes | None = None
    path: Path | None = None
    stored: StoredMedia | None = None
    width: int | None = None
    height: int | None = None
    duration_ms: int | None = None
    # How many items a ForEach's list holds (nodes/batch.py): the engine runs that many.
    items: int | None = None
    # What the provider reported this output cost, in US dollars (``Cost.pass_through``).
    provider_cost_usd: float | None = None
    # The outputs this execution took, of a node with branches (``NodeSpec.branches``);
    # None: every output.
    ports: tuple[str, ...] | None = None

    @classmethod
    def text(cls, value: str) -> Produced:
        """UTF-8 text. A lone surrogate (half of a UTF-16 pair, which a template or a decoded
        response can produce) has no UTF-8 form: the node fails with ``invalid_text``."""
        try:
            return cls(data=value.encode("utf-8"))
        except UnicodeEncodeError as exc:
            raise NodeFailure(
                f"the node produced text that is not valid Unicode: a lone surrogate "
                f"(U+{ord(value[exc.start]):04X}) at character {exc.start}",
                code="invalid_text",
            ) from exc


@dataclass(frozen=True)
class ParamProblem:
    """A problem of one param, at its path under the node's ``data`` (``("bindings", 0,
    "node")``); a plain string is about the params as a whole."""

    path: tuple[str | int, ...]
    message: str


class NodeFailure(Exception):
    """A node could not do its work; the message is shown to the user as the node's error."""

    def __init__(self, message: str, code: str = "node_failed") -> None:
        super().__init__(message)
        self.message = message
        self.code = code


T = TypeVar("T")


class NodeContext(Protocol):
    """What the executor offers a running node."""

    run_id: str
    node_id: str
    account_id: str
    input: Mapping[str, Any] | None  # the run's input data (execute body or webhook body)
    settings: Settings
    inline: bool  # on the server's event loop (``NodeType.runs_inline``), not in a sandbox
    # The kind of the account credential the node names (its endpoint and key are then in
    # ``settings.provider_base_url`` / ``provider_api_key``), None when it names none.
    credential_kind: str | None

    @property
    def scratch_dir(self) -> Path:
        """A directory private to this node execution, removed afterwards."""

    async def progress(self, fraction: float) -> None:
        """Report progress 0..1 (announced as ``node.progress``; rate-limited by the caller)."""

    async def to_thread(self, fn: Callable[..., T], /, *args: Any) -> T:
        """Run blocking work (Pillow, PyAV, eSpeak) off the event loop."""


InputValue = ArtifactRef | list[ArtifactRef] | None


def input_text(inputs: Mapping[str, InputValue], name: str = "text") -> str | None:
    """The text of input ``name``: None when it is not connected, the texts joined in edge
    order when it takes several (``Input(multiple=True)``)."""
    value = inputs.get(name)
    if value is None:
        return None
    if isinstance(value, list):
        return "".join(v.read_text() for v in value)
    return value.read_text()


class NeedsSandbox(Exception):
    """Raised by a node run inline (``runs_inline``) that found it must run in a sandbox."""


class NodeType(ABC):
    """A node type: a ``spec`` class attribute and an async ``run``. The other methods have
    defaults that fit most nodes; the server answers them from the spec alone for a
    package's node, whose code runs only in the sandbox."""

    spec: ClassVar[NodeSpec]
    # "for_each" or "collect" for the nodes that open and close a batch (nodes/batch.py).
    batch_role: ClassVar[str | None] = None
    # Inputs, output and price are another workflow's (nodes/subworkflow.py), not the spec's.
    dynamic_interface: ClassVar[bool] = False
    # "merge" for a node that runs when its inputs have *settled* (completed, skipped or on a
    # branch not taken) and at least one of them completed (nodes/flow.py Merge).
    flow_role: ClassVar[str | None] = None
    # The input whose length the priced seconds follow (a transcription is priced by the
    # audio it reads, a volume change outputs its input's length): when that length is
    # known, it bounds the estimate and the charge below ``estimate_seconds``.
    length_input: ClassVar[str | None] = None

    @abstractmethod
    def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Awaitable[Produced]:
        """Do the work. Raise ``NodeFailure`` for an error the user should read."""

    def estimate_seconds(self, params: Any) -> float:
        """Upper bound of the output's length in seconds, for per-second pricing: by default
        the ``max_seconds`` param of nodes whose length depends on their inputs."""
        return float(getattr(params, "max_seconds", 0.0))

    def bound(self, params: Any) -> NodeType:
        """The node type as these params make it, when they change its interface (an
        Approval's ``kind`` sets its input's and output's kinds); by default itself."""
        return self

    def output_names(self, params: Any) -> tuple[str, ...]:
        """The node's outputs besides ``error``: its branches (``NodeSpec.branches``, or
        names its params give, as a Switch's cases), else the one ``output``. Every output
        carries the node's one artifact; a branch node says which it took
        (``Produced.ports``)."""
        return self.spec.branches or (DEFAULT_OUTPUT,)

    def fingerprint(self, params: Any, settings: Settings) -> dict[str, Any]:
        """Everything besides the inputs that decides the output, for the output cache: the
        params as the node will resolve them (an empty ``model`` means the configured one,
        so changing the setting must not return the old model's answers)."""
        dumped: dict[str, Any] = params.model_dump(mode="json")
        return dumped

    def run_input_read(self, params: Any, run_input: Mapping[str, Any] | None) -> Any:
        """What of the run's input data decides the output, for the output cache key of a
        node that ``uses_run_input``: all of it unless the node says less. A node that reads
        one value answers that value, so a change elsewhere in the input (another key, a
        list's other items) keeps its cached output."""
        return run_input or None

    def param_problems(self, params: Any) -> Sequence[str | ParamProblem]:
        """Cheap problems the params schema cannot express; checked on the event loop."""
        return []

    def deep_problems(self, params: Any) -> list[str]:
        """Problems that take real work to find (a template's syntax): checked in a sandbox
        process when a workflow is saved, never on the event loop."""
        return []

    def needs_deep_check(self, params: Any) -> bool:
        """Must ``deep_problems`` run for these params? False when they are of a shape known
        to be fine (a template that only substitutes values), which saves saving a workflow
        a sandbox round trip."""
        return True

    def runs_inline(self, params: Any) -> bool:
        """May this node run on the server's event loop rather than in a sandbox process?
        Only when it computes nothing, or nothing whose cost could grow beyond a bounded pass
        over its inputs (a template that only substitutes values). ``run`` may still raise
        ``NeedsSandbox`` to be run in the sandbox after all."""
        return not self.spec.sandboxed

    def waits_on_provider(
        self, params: Any, settings: Settings, credential_kind: str | None
    ) -> bool:
        """Does this run call a provider, so the executor runs it on the event loop as a
        provider adapter (nodes/adapters/policy.py, holding no sandbox process while it
        waits)? ``credential_kind``: the kind of the credential its params name, if any. By
        default, what the spec says (``adapter`` and not ``sandboxed``)."""
        return self.spec.adapter and not self.spec.sandboxed

    def instant(self, params: Any) -> bool:
        """Does this node finish at once on the event loop (``runs_inline`` and no waiting)?
        The in-process driver then executes it within the step that starts it, so starting
        and finishing it cost one transaction, not two."""
        return False

    def unavailable_reason(self, settings: Settings) -> str | None:
        """Why this node cannot run with these settings (e.g. no provider), else None."""
        return None

    def estimate_credits(self, params: Any, input_ms: int | None = None) -> int:
        """The most an execution costs. ``input_ms``: the length of the ``length_input``
        when it is known (before the run: a media input's file), which then bounds the
        priced seconds."""
        cost = self.spec.cost
        if cost.per_second == 0:
            return cost.credits + cost.pass_through
        seconds = math.ceil(self.estimate_seconds(params))
        if input_ms is not None and self.length_input is not None:
            seconds = min(seconds, math.ceil(input_ms / 1000))
        return cost.credits + cost.per_second * seconds + cost.pass_through

    def charge_for(
        self, params: Any, produced: Produced, settings: Settings, input_ms: int | None = None
    ) -> int:
        """What a completed execution that produced ``produced`` costs: ``charge_credits``,
        plus the provider's reported cost for a pass-through price; never more than the
        estimate held for it (``input_ms``: as for ``estimate_credits``, the length of the
        input the execution read)."""
        charged = self.charge_credits(params, produced.duration_ms, input_ms)
        if self.spec.cost.pass_through and produced.provider_cost_usd is not None:
            usd = max(0.0, produced.provider_cost_usd)
            rate = settings.provider_credits_per_usd * (1 + settings.provider_cost_markup)
            charged += math.ceil(usd * rate - 1e-9)
        return min(charged, self.estimate_credits(params, input_ms))

    def charge_credits(
        self, params: Any, produced_duration_ms: int | None, input_ms: int | None = None
    ) -> int:
        """What a completed execution costs: flat price plus started seconds of output,
        never more than the estimate that was held for it."""
        cost = self.spec.cost
        if cost.per_second == 0 or produced_duration_ms is None:
            return cost.credits
        actual = cost.credits + cost.per_second * math.ceil(produced_duration_ms / 1000)
        return min(actual, self.estimate_credits(params, input_ms))
