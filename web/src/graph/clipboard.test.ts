import { describe, expect, it } from "vitest";
import { copySelection, newEdgeId, paste } from "./clipboard";
import type { FlowEdge, FlowNode } from "./convert";

const nodes: FlowNode[] = [
  {
    id: "TextInput_1",
    type: "TextInput",
    position: { x: 0, y: 0 },
    data: { text: "a" },
    selected: true,
  },
  { id: "RenderText_1", type: "RenderText", position: { x: 200, y: 0 }, data: {}, selected: true },
  { id: "Delay_1", type: "Delay", position: { x: 400, y: 0 }, data: {} },
];
const edges: FlowEdge[] = [
  { id: "e1", source: "TextInput_1", target: "RenderText_1", targetHandle: "text" },
  { id: "e2", source: "RenderText_1", target: "Delay_1", targetHandle: "text" },
];

describe("copy and paste", () => {
  it("copies the selected nodes and only the edges between them", () => {
    const copied = copySelection(nodes, edges);
    expect(copied?.nodes.map((n) => n.id)).toEqual(["TextInput_1", "RenderText_1"]);
    expect(copied?.edges.map((e) => e.id)).toEqual(["e1"]);
    expect(
      copySelection(
        nodes.map((n) => ({ ...n, selected: false })),
        edges,
      ),
    ).toBeNull();
  });

  it("pastes with new ids, moved, selected, connections kept, data copied", () => {
    const copied = copySelection(nodes, edges)!;
    const result = paste(copied, nodes, edges);
    const added = result.nodes.slice(3);
    expect(added.map((n) => n.id)).toEqual(["TextInput_2", "RenderText_2"]);
    expect(added[0]).toMatchObject({
      position: { x: 40, y: 40 },
      data: { text: "a" },
      selected: true,
    });
    expect(added[0]!.data).not.toBe(nodes[0]!.data);
    expect(result.nodes.slice(0, 3).every((n) => !n.selected)).toBe(true);
    expect(result.edges.slice(2)).toEqual([
      {
        id: "TextInput_2->RenderText_2:text",
        source: "TextInput_2",
        target: "RenderText_2",
        sourceHandle: null,
        targetHandle: "text",
      },
    ]);
    // Pasting what was pasted cascades: new ids again, moved again.
    const again = paste(result.pasted, result.nodes, result.edges);
    expect(again.nodes.slice(5).map((n) => [n.id, n.position.x])).toEqual([
      ["TextInput_3", 80],
      ["RenderText_3", 280],
    ]);
  });

  it("numbers an edge id that is taken", () => {
    expect(newEdgeId("a", "b", "text", [])).toBe("a->b:text");
    expect(newEdgeId("a", "b", null, [{ id: "a->b", source: "a", target: "b" }])).toBe("a->b#2");
  });
});

describe("copy and paste of groups", () => {
  const frame: FlowNode = {
    id: "Group_1",
    type: "Group",
    position: { x: 100, y: 100 },
    data: { label: "Stage" },
    style: { width: 300, height: 200 },
  };
  const member: FlowNode = {
    id: "a",
    type: "TextInput",
    position: { x: 20, y: 40 },
    parentId: "Group_1",
    data: {},
  };

  it("pastes a group with its nodes in it, keeping its size", () => {
    const copied = { nodes: [member, frame], edges: [] };
    const out = paste(copied, [frame, member], []);
    const [group, inGroup] = out.pasted.nodes;
    expect(group).toMatchObject({ id: "Group_2", position: { x: 140, y: 140 } });
    expect(group!.style).toEqual({ width: 300, height: 200 });
    expect(inGroup).toMatchObject({ parentId: "Group_2", position: { x: 20, y: 40 } });
  });

  it("pastes a node without its group at its place on the canvas", () => {
    const out = paste({ nodes: [member], edges: [] }, [frame, member], []);
    expect(out.pasted.nodes[0]!.parentId).toBeUndefined();
    expect(out.pasted.nodes[0]!.position).toEqual({ x: 160, y: 180 });
  });
});
