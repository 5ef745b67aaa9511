// Copy and paste on the canvas, as pure functions: a copy is the selected nodes with the
// connections between them; a paste adds them again with new ids, moved a little, selected.
import { newNodeId, type FlowEdge, type FlowNode } from "./convert";
import { absolutePosition, parentsFirst } from "./group";

export interface Copied {
  nodes: FlowNode[];
  edges: FlowEdge[];
}

const OFFSET = 40;

export function copySelection(nodes: FlowNode[], edges: FlowEdge[]): Copied | null {
  const chosen = nodes.filter((n) => n.selected);
  if (!chosen.length) return null;
  const ids = new Set(chosen.map((n) => n.id));
  return { nodes: chosen, edges: edges.filter((e) => ids.has(e.source) && ids.has(e.target)) };
}

/** An edge id not used yet: "source->target:input", numbered if taken. */
export function newEdgeId(
  source: string,
  target: string,
  input: string | null | undefined,
  taken: FlowEdge[],
): string {
  const base = `${source}->${target}${input ? `:${input}` : ""}`;
  let id = base;
  for (let n = 2; taken.some((e) => e.id === id); n++) id = `${base}#${n}`;
  return id;
}

/** The graph with the copy pasted in, and the copy as pasted (pasting that again cascades). */
export function paste(
  copied: Copied,
  nodes: FlowNode[],
  edges: FlowEdge[],
): { nodes: FlowNode[]; edges: FlowEdge[]; pasted: Copied } {
  const renamed = new Map<string, string>();
  const taken = nodes.map((n) => n.id);
  for (const n of copied.nodes) {
    renamed.set(n.id, newNodeId(n.type ?? "Node", [...taken, ...renamed.values()]));
  }
  // A node pasted with its group stays in the pasted group, where it was in it; one pasted
  // without it is pasted at its place on the canvas. A group keeps its size.
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const newNodes: FlowNode[] = parentsFirst(copied.nodes).map((n) => {
    const parentId = n.parentId ? renamed.get(n.parentId) : undefined;
    const at = parentId ? n.position : absolutePosition(n, byId);
    return {
      id: renamed.get(n.id) as string,
      type: n.type,
      position: parentId ? { ...at } : { x: at.x + OFFSET, y: at.y + OFFSET },
      data: structuredClone(n.data),
      selected: true,
      ...(parentId ? { parentId } : {}),
      ...(n.style ? { style: structuredClone(n.style) } : {}),
    };
  });
  const newEdges: FlowEdge[] = [];
  for (const e of copied.edges) {
    const source = renamed.get(e.source) as string;
    const target = renamed.get(e.target) as string;
    newEdges.push({
      id: newEdgeId(source, target, e.targetHandle, [...edges, ...newEdges]),
      source,
      target,
      sourceHandle: e.sourceHandle ?? null,
      targetHandle: e.targetHandle ?? null,
    });
  }
  return {
    nodes: [...nodes.map((n) => (n.selected ? { ...n, selected: false } : n)), ...newNodes],
    edges: [...edges, ...newEdges],
    pasted: { nodes: newNodes, edges: newEdges },
  };
}
