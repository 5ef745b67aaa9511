// graph_json <-> React Flow state, as one pure module.
//
// graph_json is React Flow's own saved shape, so loading passes every stored field through
// to the canvas, and saving writes back what the editor owns (id, type, position, data,
// source, target, handles) on top of the stored object, keeping every other field as it
// was. Fields React Flow adds while editing (measured, selected, dragging, ...) are written
// only if the stored node already had them. So a graph opened and saved unchanged comes back
// with the same ids, positions, data, handles and extra fields.
import type { Edge, Node } from "@xyflow/react";
import type { GraphEdge, GraphJson, GraphNode, Viewport } from "../api/types";
import { parentsFirst } from "./group";

export type FlowNode = Node<Record<string, unknown>, string>;
export type FlowEdge = Edge;

const NODE_OWNED = ["id", "type", "position", "data"] as const;
const NODE_RUNTIME = new Set([
  "measured",
  "selected",
  "dragging",
  "resizing",
  "internals",
  "positionAbsolute",
]);
const EDGE_OWNED = ["id", "source", "target", "sourceHandle", "targetHandle"] as const;
const EDGE_RUNTIME = new Set(["selected", "animated", "className", "style", "label"]);

export interface Loaded {
  nodes: FlowNode[];
  edges: FlowEdge[];
  viewport: Viewport;
  /** The stored graph, kept to write untouched fields back as they were. */
  original: GraphJson;
}

export function fromGraph(graph: GraphJson): Loaded {
  // A group comes before the nodes in it, as React Flow needs.
  const nodes = parentsFirst(
    graph.nodes.map((node) => ({ ...node, data: { ...node.data } }) as FlowNode),
  );
  const edges = graph.edges.map(
    (edge) =>
      ({
        ...edge,
        sourceHandle: edge.sourceHandle ?? null,
        targetHandle: edge.targetHandle ?? null,
      }) as FlowEdge,
  );
  return { nodes, edges, viewport: { ...graph.viewport }, original: graph };
}

function withoutUndefined<T extends Record<string, unknown>>(value: T): T {
  return Object.fromEntries(Object.entries(value).filter(([, v]) => v !== undefined)) as T;
}

export function toGraph(
  nodes: FlowNode[],
  edges: FlowEdge[],
  viewport: Viewport,
  original: GraphJson | null,
): GraphJson {
  const storedNodes = new Map((original?.nodes ?? []).map((n) => [n.id, n]));
  const storedEdges = new Map((original?.edges ?? []).map((e) => [e.id, e]));

  const outNodes = nodes.map((node): GraphNode => {
    const stored = storedNodes.get(node.id);
    const out: Record<string, unknown> = stored ? { ...stored } : {};
    for (const [key, value] of Object.entries(node)) {
      if ((NODE_OWNED as readonly string[]).includes(key)) continue;
      if (NODE_RUNTIME.has(key) && !(stored && key in stored)) continue;
      out[key] = value;
    }
    out.id = node.id;
    out.type = node.type;
    out.position = { x: node.position.x, y: node.position.y };
    out.data = { ...node.data };
    return withoutUndefined(out) as GraphNode;
  });

  const outEdges = edges.map((edge): GraphEdge => {
    const stored = storedEdges.get(edge.id);
    const out: Record<string, unknown> = stored ? { ...stored } : {};
    for (const [key, value] of Object.entries(edge)) {
      if ((EDGE_OWNED as readonly string[]).includes(key)) continue;
      if (EDGE_RUNTIME.has(key) && !(stored && key in stored)) continue;
      out[key] = value;
    }
    out.id = edge.id;
    out.source = edge.source;
    out.target = edge.target;
    // A handle the stored edge left out (the only output or input) stays left out; one it
    // stored as null stays null.
    for (const key of ["sourceHandle", "targetHandle"] as const) {
      const value = edge[key] ?? null;
      if (value !== null) out[key] = value;
      else if (stored && key in stored) out[key] = stored[key] ?? null;
      else delete out[key];
    }
    return withoutUndefined(out) as GraphEdge;
  });

  const top: Record<string, unknown> = original ? { ...original } : {};
  return {
    ...top,
    nodes: outNodes,
    edges: outEdges,
    viewport: { x: viewport.x, y: viewport.y, zoom: viewport.zoom },
  } as GraphJson;
}

/** A node id not used yet in the graph, readable: "RenderText_2". */
export function newNodeId(type: string, taken: Iterable<string>): string {
  const used = new Set(taken);
  for (let n = 1; ; n++) {
    const id = `${type}_${n}`;
    if (!used.has(id)) return id;
  }
}
