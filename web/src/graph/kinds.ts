// Which connections the editor allows: handles are typed by kind (text, image, audio,
// video, json), and a single-valued input takes one edge. The server checks the same rules.
// A node may have several outputs (an If's true and false, a Switch's cases) and every node
// has an error output (json), which an edge names in its sourceHandle.
import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "./convert";
import { specKey } from "./subworkflow";

export const OUTPUT_HANDLE = "output";
export const ERROR_HANDLE = "error";

/** One output a node's handle stands for. */
export interface OutputPort {
  name: string;
  kind: string;
  role: "output" | "branch" | "error";
}

/** The outputs of a node of type `spec` with params `data`: the catalog's list, with one
 * branch per entry of the param that adds them (a Switch's cases) first. */
export function outputsOf(spec: NodeType, data: Record<string, unknown> = {}): OutputPort[] {
  const listed: OutputPort[] = (spec.outputs ?? []).map((o) => ({
    name: o.name,
    kind: o.kind,
    role: o.role,
  }));
  if (!listed.length) {
    listed.push({ name: OUTPUT_HANDLE, kind: spec.output.kind, role: "output" });
    listed.push({ name: ERROR_HANDLE, kind: "json", role: "error" });
  }
  const param = spec.outputs_from_param;
  const entries = param ? data[param] : undefined;
  const added: OutputPort[] = Array.isArray(entries)
    ? entries
        .map((entry: unknown) =>
          entry && typeof entry === "object" && "name" in entry ? String(entry.name) : "",
        )
        .filter((name) => name && !listed.some((o) => o.name === name))
        .map((name) => ({ name, kind: spec.output.kind, role: "branch" as const }))
    : [];
  return [...added, ...listed];
}

/** The node-data field (kept by the server, not a param) that shows a node's error handle. */
export const ERROR_OUTPUT_FLAG = "error_output";

/** Does the node show its error output: asked for, or already used by an edge? */
export function showsErrorOutput(
  node: { id: string; data: Record<string, unknown> },
  edges: readonly { source: string; sourceHandle?: string | null }[],
): boolean {
  return (
    node.data[ERROR_OUTPUT_FLAG] === true ||
    edges.some((e) => e.source === node.id && e.sourceHandle === ERROR_HANDLE)
  );
}

/** The kind an edge leaving `handle` of a node of type `spec` carries. */
export function sourceKind(spec: NodeType, handle: string | null | undefined): string {
  return handle === ERROR_HANDLE ? "json" : spec.output.kind;
}

/** May an output of kind `output` feed an input of kind `input`? JSON is text. */
export function accepts(input: string, output: string): boolean {
  return input === output || (input === "text" && output === "json");
}

/** The output a new edge from a node of type `spec` leaves: its only one, or its first
 * branch. */
export function firstOutput(spec: NodeType, data: Record<string, unknown> = {}): string {
  return outputsOf(spec, data).find((o) => o.role !== "error")?.name ?? OUTPUT_HANDLE;
}

/** The label an edge shows: the output it leaves when the node has several (a branch or
 * error), none for a node's only output. */
export function edgeLabel(handle: string | null | undefined): string | undefined {
  return handle && handle !== OUTPUT_HANDLE && !KINDS.has(handle) ? handle : undefined;
}

const KINDS = new Set(["text", "image", "audio", "video", "json"]);

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
  const kind = sourceKind(from, attempt.sourceHandle);
  if (!accepts(input.kind, kind)) {
    return `${from.title} outputs ${kind}; input “${input.name}” of ${to.title} takes ${input.kind}.`;
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
        const attempt = {
          source: from.nodeId,
          target: n.id,
          sourceHandle: from.handleId,
          targetHandle: input.name,
        };
        if (refusal(attempt, nodes, edges, catalog)) refused.add(handleKey(n.id, input.name));
      }
    } else {
      for (const output of outputsOf(spec, n.data)) {
        const attempt = {
          source: n.id,
          target: from.nodeId,
          sourceHandle: output.name,
          targetHandle: from.handleId,
        };
        if (refusal(attempt, nodes, edges, catalog)) refused.add(handleKey(n.id, output.name));
      }
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
          sourceHandle: from.handleId ?? OUTPUT_HANDLE,
          targetHandle: input.name,
        }))
      : [
          {
            source: newId,
            target: from.nodeId,
            sourceHandle: firstOutput(spec),
            targetHandle: from.handleId,
          },
        ];
  return attempts.find((a) => refusal(a, withNew, edges, catalog) === null) ?? null;
}
