"""Batches: a ``ForEach`` node splits a list into items, the nodes downstream of it run once
per item, and a ``Collect`` node gathers the items' outputs back (docs/batches.md; the
engine side is engine/batches.py, the decision docs/adr/0013-batches.md).

``ForEach`` and the collectors are ordinary node types to the catalog, the editor and the
sandbox; what makes them special is their ``batch_role``, which the graph checks and the
engine read. ``ForEachItem`` is not in the catalog: the engine adds one per item when a
``ForEach`` completes (``ForEach#3`` picks item 3 out of the list), so every item's input
is an artifact of its own, cached and shown like any other.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from typing import ClassVar, Literal

from pydantic import Field

from nodeloom.nodes.image import ImageGrid, ImageGridParams
from nodeloom.nodes.inline import InlineNode
from nodeloom.nodes.video import VideoConcat, VideoConcatParams
from nodeloom.sdk._node import (
    Cost,
    Input,
    InputValue,
    Kind,
    NodeContext,
    NodeFailure,
    NodeSpec,
    NodeType,
    Output,
    Params,
    Produced,
    input_text,
)

BATCH_TOO_LARGE = "batch_too_large"


class ForEachParams(Params):
    split: Literal["lines", "json"] = Field(
        default="lines",
        description="How the input becomes items: one per non-empty line, or one per element "
        "of a JSON array (strings as they are, other values as JSON).",
    )
    concurrency: int = Field(
        default=4, ge=1, le=100, description="Items' nodes running (or queued) at once."
    )
    fail_fast: bool = Field(
        default=False,
        description="One item failing fails the run: no further item starts. Off: a failed "
        "item fails alone and the others (and the Collect) go on.",
    )
    max_items: int | None = Field(
        default=None,
        ge=1,
        description="Most items this node accepts (at most the server's cap). The estimate "
        "holds credits for this many items when their number is not known before the run.",
    )


def split_items(text: str, split: str) -> list[str]:
    """The items ``text`` holds: its non-empty lines (trimmed), or a JSON array's elements."""
    if split == "lines":
        return [line.strip() for line in text.splitlines() if line.strip()]
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise NodeFailure(f"the input is not JSON: {exc}", "invalid_input") from None
    if not isinstance(value, list):
        raise NodeFailure("the input is not a JSON array", "invalid_input")
    return [v if isinstance(v, str) else json.dumps(v, ensure_ascii=False) for v in value]


def too_many(count: int, limit: int) -> str:
    return f"the batch has {count:,} items; at most {limit:,} are allowed"


class ForEach(InlineNode):
    """Outputs the items as a JSON array of strings; the engine then runs the nodes after it
    once per item (each gets the item's text)."""

    batch_role: ClassVar[str | None] = "for_each"
    spec = NodeSpec(
        type="ForEach",
        version=1,
        category="batch",
        title="For each",
        description="Run the nodes after this one once per item of a list (lines or a JSON "
        "array); a Collect node gathers their outputs back. Every item's node runs appear in "
        "the run with their item index.",
        inputs=(Input("text", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=ForEachParams,
        cost=Cost(credits=0),
        # Its item count is read from its execution, not from a cached artifact.
        cacheable=False,
        sandboxed=False,  # splitting an inline-sized text; larger inputs are refused
    )

    def limit(self, params: ForEachParams, cap: int) -> int:
        return min(params.max_items or cap, cap)

    async def run(
        self, ctx: NodeContext, params: ForEachParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        items = split_items(input_text(inputs) or "", params.split)
        limit = self.limit(params, ctx.settings.batch_max_items)
        if len(items) > limit:
            raise NodeFailure(too_many(len(items), limit), BATCH_TOO_LARGE)
        produced = Produced.text(json.dumps(items, ensure_ascii=False))
        produced.items = len(items)
        return produced


class ItemParams(Params):
    index: int = Field(ge=0)


# Item lists parsed lately, by content hash: the N items of one list are picked by N nodes.
_PARSED: OrderedDict[str, list[str]] = OrderedDict()


class ForEachItem(InlineNode):
    """Item ``index`` of a ForEach's list (added by the engine, not in the catalog)."""

    spec = NodeSpec(
        type="ForEachItem",
        version=1,
        category="batch",
        title="Item",
        description="One item of a ForEach's list.",
        inputs=(Input("list", Kind.TEXT),),
        output=Output(Kind.TEXT),
        params=ItemParams,
        cost=Cost(credits=0),
        sandboxed=False,
    )

    async def run(
        self, ctx: NodeContext, params: ItemParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        ref = inputs.get("list")
        assert ref is not None and not isinstance(ref, list)
        items = _PARSED.get(ref.sha256)
        if items is None:
            items = json.loads(ref.read_text())
            _PARSED[ref.sha256] = items
            if len(_PARSED) > 8:
                _PARSED.popitem(last=False)
        return Produced.text(items[params.index])


class CollectParams(Params):
    pass


class Collect(InlineNode):
    batch_role: ClassVar[str | None] = "collect"
    spec = NodeSpec(
        type="Collect",
        version=1,
        category="batch",
        title="Collect texts",
        description="Gather the items' texts of a ForEach into a JSON array, in item order; "
        "an item that did not complete is null.",
        inputs=(Input("items", Kind.TEXT, multiple=True, required=True),),
        output=Output(Kind.TEXT),
        params=CollectParams,
        cost=Cost(credits=0),
        # Encoding inline-sized texts as JSON is one bounded pass: on the loop, within the
        # step (larger inputs go to a sandbox process, as for any node).
        sandboxed=False,
    )

    async def run(
        self, ctx: NodeContext, params: CollectParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        value = inputs.get("items")
        refs = value if isinstance(value, list) else [value]
        texts = [ref.read_text() if ref is not None else None for ref in refs]
        return Produced.text(json.dumps(texts, ensure_ascii=False))


def _completed(inputs: Mapping[str, InputValue], name: str) -> dict[str, InputValue]:
    """The items that completed (a collector gets None for the others)."""
    value = inputs.get(name)
    refs = value if isinstance(value, list) else [value]
    return {name: [ref for ref in refs if ref is not None]}


class CollectImages(ImageGrid):
    batch_role: ClassVar[str | None] = "collect"
    spec = NodeSpec(
        type="CollectImages",
        version=1,
        category="batch",
        title="Collect images",
        description="Gather the items' images of a ForEach into one grid PNG, in item order "
        "(items that did not complete are left out).",
        inputs=(Input("images", Kind.IMAGE, multiple=True),),
        output=Output(Kind.IMAGE),
        params=ImageGridParams,
        cost=Cost(credits=2),
    )

    async def run(
        self, ctx: NodeContext, params: ImageGridParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return await super().run(ctx, params, _completed(inputs, "images"))


class CollectVideos(VideoConcat):
    batch_role: ClassVar[str | None] = "collect"
    spec = NodeSpec(
        type="CollectVideos",
        version=1,
        category="batch",
        title="Collect videos",
        description="Join the items' videos of a ForEach end to end into one MP4, in item "
        "order (items that did not complete are left out).",
        inputs=(Input("videos", Kind.VIDEO, multiple=True),),
        output=Output(Kind.VIDEO),
        params=VideoConcatParams,
        cost=Cost(credits=2, per_second=1),
    )

    async def run(
        self, ctx: NodeContext, params: VideoConcatParams, inputs: Mapping[str, InputValue]
    ) -> Produced:
        return await super().run(ctx, params, _completed(inputs, "videos"))


FOR_EACH_ITEM = ForEachItem()

NODES: list[NodeType] = [ForEach(), Collect(), CollectImages(), CollectVideos()]
