"""The ``Workflow`` node: another workflow of the same account, run as one step.

Its interface is not static like other nodes': it is the child workflow's. Before a graph
is validated, every ``Workflow`` node's child is resolved (engine/subworkflows.py reads the
stored children, transitively, and finds cycles and ids the account does not have) and the
node is *bound* to the child's interface: one optional text input per distinct input of
the child's ``TextInput`` nodes (its ``key``, or ``text`` for a TextInput without one), and
the child's single output node's kind as its output. Validation itself stays pure
(engine/graph.py takes the resolved interfaces as data).

The node is never executed like other nodes: the engine starts the child as a real run
through the same acceptor as any run and waits for its end without a sandbox process
(engine/subworkflows.py). Its estimate is the child's, so the parent's estimate counts the
child's cost.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import Field

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
)

WORKFLOW_TYPE = "Workflow"


class WorkflowParams(Params):
    workflow_id: str = Field(
        min_length=1,
        max_length=36,
        description="The workflow to run (of the same account). Its TextInput nodes are this "
        "node's inputs (named by their `key`, or `text`), its one output node this node's "
        "output.",
        json_schema_extra={"format": "workflow-id"},
    )


@dataclass(frozen=True)
class ChildInterface:
    """A child workflow as a ``Workflow`` node sees it."""

    workflow_id: str
    inputs: tuple[str, ...]  # input names: the TextInputs' keys ("text" without one)
    output_node: str
    output: Kind
    estimate: int  # credits a run of it holds


class Workflow(NodeType):
    """Runs another workflow of the account as a step: the child run is a real run (listed,
    with its own node runs, events and charges), linked from this node's run
    (``child_run_id``) and back (``parent_run_id``). Cancelling the parent cancels it."""

    spec = NodeSpec(
        type=WORKFLOW_TYPE,
        version=1,
        category="flow",
        title="Workflow",
        description="Runs another workflow of this account as a step. Inputs: one optional "
        "text input per TextInput of that workflow (named by its `key`, or `text`); output: "
        "its one output node's, of that node's kind. Priced at that workflow's estimate.",
        inputs=(),
        output=Output(Kind.TEXT),  # as drawn; bound to the child's output kind when checked
        params=WorkflowParams,
        cost=Cost(credits=0),
        cacheable=False,  # a child run is started every time (it may have side effects)
        sandboxed=False,  # it only waits for the child run
    )
    child: ChildInterface | None = None
    dynamic_interface = True

    def estimate_credits(self, params: Any, input_ms: int | None = None) -> int:
        return self.child.estimate if self.child is not None else 0

    def charge_credits(
        self, params: Any, produced_duration_ms: int | None, input_ms: int | None = None
    ) -> int:
        return 0  # the child run charges what it uses, itself

    async def run(
        self, ctx: NodeContext, params: Any, inputs: Mapping[str, InputValue]
    ) -> Produced:
        # The engine runs the child (engine/subworkflows.py); nothing executes this.
        raise NodeFailure("a Workflow node runs through the engine", "internal_error")


def bind(child: ChildInterface) -> NodeType:
    """The ``Workflow`` node type as it is for ``child``: the child's inputs and output."""
    spec = replace(
        Workflow.spec,
        inputs=tuple(Input(name, Kind.TEXT, required=False) for name in child.inputs),
        output=Output(child.output),
    )
    bound = type("Workflow", (Workflow,), {"spec": spec, "child": child})
    node: NodeType = bound()
    return node


NODES: list[NodeType] = [Workflow()]
