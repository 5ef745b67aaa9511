import { describe, expect, it } from "vitest";
import type { FlowEdge, FlowNode } from "./convert";
import {
  GROUP_HEADER,
  GROUP_PADDING,
  deletionKeepingMembers,
  groupNodes,
  parentsFirst,
  ungroupNodes,
} from "./group";

function node(id: string, x: number, y: number, extra: Partial<FlowNode> = {}): FlowNode {
  return {
    id,
    type: "TextInput",
    position: { x, y },
    data: {},
    measured: { width: 200, height: 100 },
    ...extra,
  };
}

const P = GROUP_PADDING;
const H = GROUP_HEADER;

describe("groupNodes", () => {
  it("frames the chosen nodes and makes their positions relative to the group", () => {
    const nodes = [node("a", 100, 50), node("b", 400, 150), node("c", 0, 0)];
    const out = groupNodes(nodes, ["a", "b"], "Group_1", "Prompt")!;
    expect(out[0]).toEqual({
      id: "Group_1",
      type: "Group",
      position: { x: 100 - P, y: 50 - P - H },
      data: { label: "Prompt" },
      style: { width: 300 + 200 + 2 * P, height: 100 + 100 + 2 * P + H },
    });
    const a = out.find((n) => n.id === "a")!;
    const b = out.find((n) => n.id === "b")!;
    expect(a).toMatchObject({ parentId: "Group_1", position: { x: P, y: P + H } });
    expect(b).toMatchObject({ parentId: "Group_1", position: { x: 300 + P, y: 100 + P + H } });
    expect(out.find((n) => n.id === "c")).toEqual(nodes[2]);
  });

  it("leaves groups out and answers null when nothing is left", () => {
    const frame = node("g", 0, 0, { type: "Group" });
    expect(groupNodes([frame], ["g"], "Group_2", "x")).toBeNull();
    expect(groupNodes([node("a", 0, 0)], [], "Group_2", "x")).toBeNull();
  });

  it("takes a member out of its old group at its absolute position, dropping an empty group", () => {
    const old = node("old", 1000, 1000, { type: "Group" });
    const a = node("a", 10, 20, { parentId: "old" });
    const out = groupNodes([old, a], ["a"], "Group_1", "New")!;
    expect(out.map((n) => n.id)).toEqual(["Group_1", "a"]);
    expect(out[0]!.position).toEqual({ x: 1010 - P, y: 1020 - P - H });
    expect(out[1]).toMatchObject({ parentId: "Group_1", position: { x: P, y: P + H } });
  });
});

describe("ungroupNodes", () => {
  it("removes the group and keeps its members where they are on the canvas", () => {
    const nodes = groupNodes([node("a", 100, 50), node("b", 400, 150)], ["a", "b"], "G", "t")!;
    const out = ungroupNodes(nodes, "G");
    expect(out.map((n) => n.id)).toEqual(["a", "b"]);
    expect(out[0]!.position).toEqual({ x: 100, y: 50 });
    expect(out[1]!.position).toEqual({ x: 400, y: 150 });
    expect(out.every((n) => n.parentId === undefined)).toBe(true);
  });
});

describe("deletionKeepingMembers", () => {
  it("deletes the group, not its members nor their edges", () => {
    const frame = node("G", 0, 0, { type: "Group", selected: true });
    const a = node("a", 10, 10, { parentId: "G" });
    const b = node("b", 10, 10, { parentId: "G", selected: true });
    const edges: FlowEdge[] = [
      { id: "a->x", source: "a", target: "x" },
      { id: "a->b", source: "a", target: "b" },
    ];
    const out = deletionKeepingMembers({ nodes: [frame, a, b], edges });
    expect(out.nodes.map((n) => n.id)).toEqual(["G", "b"]);
    expect([...out.keep]).toEqual(["a"]);
    expect(out.edges.map((e) => e.id)).toEqual(["a->b"]);
  });
});

describe("parentsFirst", () => {
  it("puts groups before the other nodes, keeping the order otherwise", () => {
    const nodes = [node("a", 0, 0), node("G", 0, 0, { type: "Group" }), node("b", 0, 0)];
    expect(parentsFirst(nodes).map((n) => n.id)).toEqual(["G", "a", "b"]);
  });
});
