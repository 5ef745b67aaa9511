// A 400 invalid_graph lists problems by JSON pointer into the request body
// (/graph_json/nodes/3/data/width, /graph_json/edges/1/target). The editor paints each one on
// the node or edge it names; the rest are shown as a list above the canvas.
import type { GraphJson } from "../api/types";

export interface Placed {
  nodes: Map<string, string[]>;
  edges: Map<string, string[]>;
  general: string[];
}

export function placeProblems(
  errors: { pointer: string; message: string }[],
  sent: GraphJson,
): Placed {
  const placed: Placed = { nodes: new Map(), edges: new Map(), general: [] };
  for (const { pointer, message } of errors) {
    const match = /^\/graph_json\/(nodes|edges)\/(\d+)(?:\/|$)/.exec(pointer);
    const list = match ? (match[1] === "nodes" ? sent.nodes : sent.edges) : null;
    const item = match && list ? list[Number(match[2])] : undefined;
    if (!match || !item) {
      placed.general.push(message);
      continue;
    }
    const into = match[1] === "nodes" ? placed.nodes : placed.edges;
    into.set(item.id, [...(into.get(item.id) ?? []), message]);
  }
  return placed;
}
