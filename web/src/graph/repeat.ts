// Repeat regions (docs/repeat.md): which nodes a Repeat runs again, and how many times at
// most — so a node of the region shows "iteration 2/5" rather than a batch's "2/5 items".
// Pure, over graph_json's node and edge shapes (the editor and the run page share it).
import type { EdgeLike, NodeLike } from "./outputs";

/** The server's default for a Repeat's `max_iterations` (RepeatParams). */
export const DEFAULT_MAX_ITERATIONS = 3;

/** Every node of a Repeat region — the Repeat, the nodes up to its Until, the Until — with
 * the Repeat's `max_iterations`. A node reached from two Repeats (the server refuses such a
 * graph) keeps the first. */
export function repeatBounds(graph: { nodes: NodeLike[]; edges: EdgeLike[] }): Map<string, number> {
  const types = new Map(graph.nodes.map((n) => [n.id, n.type]));
  const next = new Map<string, string[]>();
  for (const e of graph.edges) next.set(e.source, [...(next.get(e.source) ?? []), e.target]);
  const bounds = new Map<string, number>();
  for (const node of graph.nodes) {
    if (node.type !== "Repeat") continue;
    const raw = node.data?.max_iterations;
    const max = typeof raw === "number" && raw >= 1 ? raw : DEFAULT_MAX_ITERATIONS;
    const seen = new Set<string>([node.id]);
    const stack = [...(next.get(node.id) ?? [])];
    while (stack.length > 0) {
      const id = stack.pop() as string;
      if (seen.has(id)) continue;
      seen.add(id);
      if (types.get(id) !== "Until") stack.push(...(next.get(id) ?? []));
    }
    for (const id of seen) if (!bounds.has(id)) bounds.set(id, max);
  }
  return bounds;
}

/** "iteration 2/5": the iterations a run has made of at most `max`. */
export function iterationLabel(iterations: number, max: number): string {
  return `iteration ${iterations}/${Math.max(max, iterations)}`;
}
