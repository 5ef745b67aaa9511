// Groups on the canvas: a node of type GROUP_TYPE is a titled frame (its title is data.label)
// around the nodes whose parentId names it, React Flow's sub flows: a member's position is
// relative to its group, so moving the group moves its members. The server keeps groups in
// graph_json and never runs, estimates or connects them (docs/webapp.md, "Groups").
// Not importing convert.ts (which imports this module): React Flow's own types, as it has them.
import type { Edge, Node } from "@xyflow/react";

type FlowNode = Node<Record<string, unknown>, string>;
type FlowEdge = Edge;

export const GROUP_TYPE = "Group";
export const GROUP_TITLE_MAX = 80;
/** Room around the members, and above them for the title. */
export const GROUP_PADDING = 24;
export const GROUP_HEADER = 32;
const DEFAULT_SIZE = { width: 220, height: 120 };

export function isGroup(node: { type?: unknown }): boolean {
  return node.type === GROUP_TYPE;
}

type Positioned = Pick<FlowNode, "id" | "type" | "position" | "parentId"> &
  Partial<Pick<FlowNode, "measured" | "width" | "height" | "style">>;

/** Where the node is on the canvas: its position plus its group's, if it is in one. */
export function absolutePosition(
  node: Positioned,
  byId: ReadonlyMap<string, Positioned>,
): { x: number; y: number } {
  const parent = node.parentId ? byId.get(node.parentId) : undefined;
  if (!parent) return { ...node.position };
  return { x: node.position.x + parent.position.x, y: node.position.y + parent.position.y };
}

function size(node: Positioned): { width: number; height: number } {
  const style = node.style ?? {};
  const width = node.measured?.width ?? node.width ?? numberOf(style.width);
  const height = node.measured?.height ?? node.height ?? numberOf(style.height);
  return { width: width ?? DEFAULT_SIZE.width, height: height ?? DEFAULT_SIZE.height };
}

function numberOf(value: unknown): number | undefined {
  return typeof value === "number" ? value : undefined;
}

/** The nodes that can go into a new group: the given ones less groups themselves (groups do
 * not nest). */
export function groupable<T extends Positioned>(nodes: readonly T[], ids: Iterable<string>): T[] {
  const wanted = new Set(ids);
  return nodes.filter((n) => wanted.has(n.id) && !isGroup(n));
}

/** The nodes with a new group `groupId` framing `ids` (a member already in another group
 * leaves it; a group left empty goes). The group comes first: React Flow draws a parent
 * before its children. Null when there is nothing to group. */
export function groupNodes<T extends Positioned>(
  nodes: readonly T[],
  ids: Iterable<string>,
  groupId: string,
  title: string,
): (T | FlowNode)[] | null {
  const members = groupable(nodes, ids);
  if (members.length === 0) return null;
  const byId = new Map<string, Positioned>(nodes.map((n) => [n.id, n]));
  const boxes = members.map((m) => ({ at: absolutePosition(m, byId), ...size(m) }));
  const left = Math.min(...boxes.map((b) => b.at.x)) - GROUP_PADDING;
  const top = Math.min(...boxes.map((b) => b.at.y)) - GROUP_PADDING - GROUP_HEADER;
  const right = Math.max(...boxes.map((b) => b.at.x + b.width)) + GROUP_PADDING;
  const bottom = Math.max(...boxes.map((b) => b.at.y + b.height)) + GROUP_PADDING;
  const group: FlowNode = {
    id: groupId,
    type: GROUP_TYPE,
    position: { x: left, y: top },
    data: { label: title },
    style: { width: right - left, height: bottom - top },
  };
  const memberIds = new Set(members.map((m) => m.id));
  const moved = nodes.map((n) => {
    if (!memberIds.has(n.id)) return n;
    const at = boxes[members.indexOf(n)]!.at;
    return { ...n, parentId: groupId, position: { x: at.x - left, y: at.y - top } };
  });
  const stillUsed = new Set(moved.map((n) => n.parentId).filter(Boolean));
  const emptied = new Set(
    members.map((m) => m.parentId).filter((p): p is string => !!p && !stillUsed.has(p)),
  );
  return [group, ...moved.filter((n) => !emptied.has(n.id))];
}

/** The nodes with group `groupId` removed and its members kept where they are on the canvas
 * (absolute positions, no parentId). */
export function ungroupNodes<T extends Positioned>(nodes: readonly T[], groupId: string): T[] {
  return releaseMembers(nodes, new Set([groupId])).filter((n) => n.id !== groupId);
}

/** The members of the groups `groupIds` let go, at their absolute positions; the groups stay. */
export function releaseMembers<T extends Positioned>(
  nodes: readonly T[],
  groupIds: ReadonlySet<string>,
): T[] {
  const byId = new Map<string, Positioned>(nodes.map((n) => [n.id, n]));
  return nodes.map((n) => {
    if (!n.parentId || !groupIds.has(n.parentId)) return n;
    const out: T & { extent?: unknown } = { ...n, position: absolutePosition(n, byId) };
    delete out.parentId;
    delete out.extent;
    return out;
  });
}

/** What a deletion removes when it takes a group: the group, not its members (React Flow
 * would take them along, with their edges), unless they were chosen too. `keep`: the members
 * to let go of their group before the group goes. */
export function deletionKeepingMembers<N extends Positioned & { selected?: boolean }>(doomed: {
  nodes: N[];
  edges: FlowEdge[];
}): { nodes: N[]; edges: FlowEdge[]; keep: Set<string> } {
  const groups = new Set(doomed.nodes.filter(isGroup).map((n) => n.id));
  const keep = new Set(
    doomed.nodes
      .filter((n) => n.parentId && groups.has(n.parentId) && !n.selected)
      .map((n) => n.id),
  );
  const nodes = doomed.nodes.filter((n) => !keep.has(n.id));
  const gone = new Set(nodes.map((n) => n.id));
  const edges = doomed.edges.filter((e) => e.selected || gone.has(e.source) || gone.has(e.target));
  return { nodes, edges, keep };
}

/** The nodes with every group before the nodes in it (React Flow's order for sub flows),
 * otherwise in their order. */
export function parentsFirst<T extends { type?: string }>(nodes: readonly T[]): T[] {
  return [...nodes.filter(isGroup), ...nodes.filter((n) => !isGroup(n))];
}
