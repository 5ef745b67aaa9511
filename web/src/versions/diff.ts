// What changed between two saved versions of a workflow: nodes added, removed or changed
// (type, params, name, position), connections added or removed, the workflow's name. Pure: graph_json in,
// a description out, so the History panel only draws it.
import type { GraphEdge, GraphJson, GraphNode } from "../api/types";
import { nodeLabel } from "../graph/label";

export interface ParamChange {
  name: string;
  /** undefined: the param was not set on that side. */
  before: unknown;
  after: unknown;
}

export interface NodeChange {
  id: string;
  type: string;
  /** The type before, when it changed. */
  typeBefore?: string;
  params: ParamChange[];
  /** The node's name (data.label) before and after, when it changed. */
  renamed?: { before: string | undefined; after: string | undefined };
  moved: boolean;
}

export interface GraphDiff {
  name?: { before: string; after: string };
  added: GraphNode[];
  removed: GraphNode[];
  changed: NodeChange[];
  edgesAdded: GraphEdge[];
  edgesRemoved: GraphEdge[];
}

/** JSON values equal by content (key order of objects ignored). */
export function sameValue(a: unknown, b: unknown): boolean {
  if (a === b) return true;
  if (typeof a !== typeof b || a === null || b === null || typeof a !== "object") return false;
  if (Array.isArray(a) || Array.isArray(b)) {
    if (!Array.isArray(a) || !Array.isArray(b) || a.length !== b.length) return false;
    return a.every((item, i) => sameValue(item, b[i]));
  }
  const left = a as Record<string, unknown>;
  const right = b as Record<string, unknown>;
  const keys = new Set([...Object.keys(left), ...Object.keys(right)]);
  for (const key of keys) {
    if (!sameValue(left[key], right[key])) return false;
  }
  return true;
}

function paramChanges(before: GraphNode, after: GraphNode): ParamChange[] {
  const a = before.data ?? {};
  const b = after.data ?? {};
  const names = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
  return names
    .filter((name) => name !== "label" && !sameValue(a[name], b[name]))
    .map((name) => ({ name, before: a[name], after: b[name] }));
}

/** A connection's identity: what it joins, whatever its id (the editor makes new ids). */
export function edgeKey(edge: GraphEdge): string {
  return [edge.source, edge.sourceHandle ?? "", edge.target, edge.targetHandle ?? ""].join(
    "\u0000",
  );
}

/** How graph ``after`` differs from ``before``; nodes are matched by id. */
export function diffGraphs(
  before: GraphJson,
  after: GraphJson,
  names?: { before: string; after: string },
): GraphDiff {
  const old = new Map(before.nodes.map((n) => [n.id, n]));
  const now = new Map(after.nodes.map((n) => [n.id, n]));
  const added = after.nodes.filter((n) => !old.has(n.id));
  const removed = before.nodes.filter((n) => !now.has(n.id));
  const changed: NodeChange[] = [];
  for (const node of after.nodes) {
    const was = old.get(node.id);
    if (!was) continue;
    const params = paramChanges(was, node);
    const moved = !sameValue(was.position, node.position);
    const typeChanged = was.type !== node.type;
    const labelBefore = nodeLabel(was.data);
    const labelAfter = nodeLabel(node.data);
    const renamed = labelBefore !== labelAfter;
    if (params.length || moved || typeChanged || renamed) {
      changed.push({
        id: node.id,
        type: node.type,
        ...(typeChanged ? { typeBefore: was.type } : {}),
        ...(renamed ? { renamed: { before: labelBefore, after: labelAfter } } : {}),
        params,
        moved,
      });
    }
  }
  const oldEdges = new Set(before.edges.map(edgeKey));
  const newEdges = new Set(after.edges.map(edgeKey));
  const result: GraphDiff = {
    added,
    removed,
    changed,
    edgesAdded: after.edges.filter((e) => !oldEdges.has(edgeKey(e))),
    edgesRemoved: before.edges.filter((e) => !newEdges.has(edgeKey(e))),
  };
  if (names && names.before !== names.after) result.name = names;
  return result;
}

/** Whether nothing but node positions changed (or nothing at all). */
export function onlyLayout(diff: GraphDiff): boolean {
  return (
    !diff.name &&
    !diff.added.length &&
    !diff.removed.length &&
    !diff.edgesAdded.length &&
    !diff.edgesRemoved.length &&
    diff.changed.every((c) => !c.params.length && !c.typeBefore && !c.renamed)
  );
}

/** A param value as one short line: strings quoted, objects as JSON, long ones cut. */
export function showValue(value: unknown, max = 80): string {
  if (value === undefined) return "(not set)";
  const text = typeof value === "string" ? JSON.stringify(value) : (JSON.stringify(value) ?? "");
  return text.length > max ? `${text.slice(0, max - 1)}…` : text;
}
