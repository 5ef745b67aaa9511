// Which nodes make a run's outputs, and which outputs a later edit has made stale: pure
// functions over graph_json's node and edge shapes (the run page and the editor share them).

import { isGroup } from "./group";
import { isNote } from "./note";

/** The fields of a node that decide what it computes (its position does not). */
export interface NodeLike {
  id: string;
  type?: string;
  data?: Record<string, unknown>;
}

export interface EdgeLike {
  source: string;
  target: string;
  targetHandle?: string | null;
}

/** A run's outputs: the nodes no edge leaves (README, "Outputs"), in graph order; a sticky
 * note or a group is no node of the run. */
export function outputNodeIds(graph: { nodes: NodeLike[]; edges: EdgeLike[] }): string[] {
  const sources = new Set(graph.edges.map((e) => e.source));
  return graph.nodes
    .filter((n) => !sources.has(n.id) && !isNote(n) && !isGroup(n))
    .map((n) => n.id);
}

/** The node runs of a run, outputs first (in the order the run lists them), then the rest.
 * `outputs` null (the graph is not known yet) keeps the run's order. */
export function outputsFirst<T extends { node_id: string }>(
  nodeRuns: T[],
  outputs: ReadonlySet<string> | null,
): { outputs: T[]; others: T[] } {
  if (!outputs) return { outputs: [], others: nodeRuns };
  return {
    outputs: nodeRuns.filter((n) => outputs.has(n.node_id)),
    others: nodeRuns.filter((n) => !outputs.has(n.node_id)),
  };
}

/** A text preview longer than this many characters or lines is shown folded. */
export const LONG_TEXT_CHARS = 600;
export const LONG_TEXT_LINES = 12;

export function isLongText(text: string): boolean {
  return text.length > LONG_TEXT_CHARS || text.split("\n").length > LONG_TEXT_LINES;
}

function stable(value: unknown): string {
  if (Array.isArray(value)) return `[${value.map(stable).join(",")}]`;
  if (value && typeof value === "object") {
    const entries = Object.entries(value as Record<string, unknown>)
      .filter(([, v]) => v !== undefined)
      .sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    return `{${entries.map(([k, v]) => `${JSON.stringify(k)}:${stable(v)}`).join(",")}}`;
  }
  return JSON.stringify(value) ?? "undefined";
}

/** What a node computes from, position left out: type, params (by JSON content, key order
 * ignored) and which node feeds which input. */
function fingerprint(node: NodeLike, edges: EdgeLike[]): string {
  const inputs = edges
    .filter((e) => e.target === node.id)
    .map((e) => `${e.targetHandle ?? ""}<-${e.source}`)
    .sort();
  return stable({ type: node.type ?? null, data: node.data ?? {}, inputs });
}

/** The nodes whose shown output no longer matches the graph: a node whose type, params or
 * connections changed since `ran` (the graph the shown run was started from), and every node
 * downstream of one (through the edges of `now`). Nodes added since are not listed (they have
 * no output to mark). */
export function staleNodeIds(
  ran: { nodes: NodeLike[]; edges: EdgeLike[] },
  now: { nodes: NodeLike[]; edges: EdgeLike[] },
): Set<string> {
  const before = new Map(ran.nodes.map((n) => [n.id, fingerprint(n, ran.edges)]));
  const changed = now.nodes
    .filter((n) => before.has(n.id) && before.get(n.id) !== fingerprint(n, now.edges))
    .map((n) => n.id);
  const stale = new Set<string>();
  const queue = [...changed];
  while (queue.length) {
    const id = queue.shift() as string;
    if (stale.has(id)) continue;
    stale.add(id);
    for (const e of now.edges) if (e.source === id && !stale.has(e.target)) queue.push(e.target);
  }
  for (const id of [...stale]) if (!before.has(id)) stale.delete(id);
  return stale;
}
