// Which connections the editor allows: handles are typed by kind (text, image, audio,
// video), and a single-valued input takes one edge. The server checks the same rules.
import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "./convert";
import { specKey } from "./subworkflow";

export const OUTPUT_HANDLE = "output";

export interface Attempt {
  source: string;
  target: string;
  sourceHandle?: string | null;
  targetHandle?: string | null;
}

/** The input an edge enters: its targetHandle, or the target's only input. */
export function targetInput(spec: NodeType, handle: string | null | undefined): string | null {
  if (handle) return handle;
  return spec.inputs.length === 1 ? (spec.inputs[0]?.name ?? null) : null;
}

/** Why a connection is refused, or null when it is allowed. */
export function refusal(
  attempt: Attempt,
  nodes: FlowNode[],
  edges: FlowEdge[],
  catalog: Map<string, NodeType>,
): string | null {
  const source = nodes.find((n) => n.id === attempt.source);
  const target = nodes.find((n) => n.id === attempt.target);
  if (!source || !target) return "Connect two nodes of this graph.";
  if (source.id === target.id) return "A node cannot feed itself.";
  const from = catalog.get(specKey(source));
  const to = catalog.get(specKey(target));
  if (!from || !to) return "Unknown node type.";
  const inputName = targetInput(to, attempt.targetHandle);
  const input = to.inputs.find((i) => i.name === inputName);
  if (!input) return `${to.title} has no such input.`;
  if (input.kind !== from.output.kind) {
    return `${from.title} outputs ${from.output.kind}; input “${input.name}” of ${to.title} takes ${input.kind}.`;
  }
  if (!input.multiple) {
    const taken = edges.some(
      (e) => e.target === target.id && targetInput(to, e.targetHandle) === input.name,
    );
    if (taken) return `Input “${input.name}” of ${to.title} already has a connection.`;
  }
  if (reaches(target.id, source.id, edges)) return "That connection would make a cycle.";
  return null;
}

function reaches(from: string, to: string, edges: FlowEdge[]): boolean {
  const seen = new Set<string>();
  const stack = [from];
  while (stack.length) {
    const current = stack.pop() as string;
    if (current === to) return true;
    if (seen.has(current)) continue;
    seen.add(current);
    for (const e of edges) if (e.source === current) stack.push(e.target);
  }
  return false;
}

/** The handle a connection is being dragged from. */
export interface DraggedFrom {
  nodeId: string;
  handleId: string | null;
  type: "source" | "target";
}

export function handleKey(nodeId: string, handleId: string | null | undefined): string {
  return `${nodeId}:${handleId ?? ""}`;
}

/** While a connection is dragged from `from`: every handle it may not end on (by
 * `handleKey`), so the canvas paints them red before the user lets go. */
export function refusedHandles(
  from: DraggedFrom,
  nodes: FlowNode[],
  edges: FlowEdge[],
  catalog: Map<string, NodeType>,
): Set<string> {
  const refused = new Set<string>();
  for (const n of nodes) {
    const spec = catalog.get(specKey(n));
    if (!spec) continue;
    if (from.type === "source") {
      for (const input of spec.inputs) {
        const attempt = { source: from.nodeId, target: n.id, targetHandle: input.name };
        if (refusal(attempt, nodes, edges, catalog)) refused.add(handleKey(n.id, input.name));
      }
    } else {
      const attempt = { source: n.id, target: from.nodeId, targetHandle: from.handleId };
      if (refusal(attempt, nodes, edges, catalog)) refused.add(handleKey(n.id, OUTPUT_HANDLE));
    }
  }
  return refused;
}

/** The edge that joins a new node `newId` of type `newType` to the handle a connection was
 * dragged from (its first input that fits, or its output), or null when none fits. */
export function edgeToNew(
  from: DraggedFrom,
  newId: string,
  newType: string,
  nodes: FlowNode[],
  edges: FlowEdge[],
  catalog: Map<string, NodeType>,
): Required<Attempt> | null {
  const spec = catalog.get(newType);
  if (!spec) return null;
  const withNew = [...nodes, { id: newId, type: newType, position: { x: 0, y: 0 }, data: {} }];
  const attempts: Required<Attempt>[] =
    from.type === "source"
      ? spec.inputs.map((input) => ({
          source: from.nodeId,
          target: newId,
          sourceHandle: OUTPUT_HANDLE,
          targetHandle: input.name,
        }))
      : [
          {
            source: newId,
            target: from.nodeId,
            sourceHandle: OUTPUT_HANDLE,
            targetHandle: from.handleId,
          },
        ];
  return attempts.find((a) => refusal(a, withNew, edges, catalog) === null) ?? null;
}
