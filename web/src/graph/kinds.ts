// Which connections the editor allows: handles are typed by kind (text, image, audio,
// video), and a single-valued input takes one edge. The server checks the same rules.
import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "./convert";

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
  const from = catalog.get(source.type ?? "");
  const to = catalog.get(target.type ?? "");
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
