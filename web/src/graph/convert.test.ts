import { describe, expect, it } from "vitest";
import { fromGraph, newNodeId, toGraph, type FlowEdge, type FlowNode } from "./convert";
import type { GraphJson } from "../api/types";

const stored: GraphJson = {
  nodes: [
    {
      id: "in",
      type: "TextInput",
      position: { x: 0.5, y: -20 },
      data: { text: "world" },
      width: 180,
      selected: false,
      custom: { kept: true },
    },
    { id: "tpl", type: "TextTemplate", position: { x: 250, y: 0 }, data: { template: "Hi" } },
  ],
  edges: [
    { id: "e1", source: "in", target: "tpl" },
    {
      id: "e2",
      source: "in",
      target: "tpl",
      sourceHandle: "output",
      targetHandle: null,
      animated: true,
    },
  ],
  viewport: { x: -12.25, y: 3, zoom: 0.75 },
  extra_top_level: { kept: [1, 2, 3] },
};

/** What React Flow does to its state while a graph is merely shown: measures nodes. */
function asShown(nodes: FlowNode[]): FlowNode[] {
  return nodes.map((n) => ({ ...n, measured: { width: 180, height: 90 } }));
}

describe("graph_json round trip", () => {
  it("saves an unchanged graph exactly as it was stored", () => {
    const loaded = fromGraph(structuredClone(stored));
    const saved = toGraph(asShown(loaded.nodes), loaded.edges, loaded.viewport, loaded.original);
    expect(saved).toEqual(stored);
    expect(JSON.stringify(saved)).toEqual(JSON.stringify(stored));
  });

  it("gives React Flow every stored field and fills absent handles with null", () => {
    const loaded = fromGraph(structuredClone(stored));
    expect(loaded.nodes[0]).toMatchObject({ id: "in", width: 180, custom: { kept: true } });
    expect(loaded.edges[0]).toMatchObject({ sourceHandle: null, targetHandle: null });
    expect(loaded.viewport).toEqual(stored.viewport);
  });

  it("writes moves, params, new nodes and edges, and the current viewport", () => {
    const loaded = fromGraph(structuredClone(stored));
    const nodes: FlowNode[] = loaded.nodes.map((n) =>
      n.id === "tpl"
        ? { ...n, position: { x: 300, y: 40 }, data: { template: "Bye" }, selected: true }
        : n,
    );
    nodes.push({
      id: "Delay_1",
      type: "Delay",
      position: { x: 1, y: 2 },
      data: {},
      selected: true,
    });
    const edges: FlowEdge[] = [
      ...loaded.edges,
      { id: "e3", source: "tpl", target: "Delay_1", sourceHandle: "output", targetHandle: "text" },
    ];
    const saved = toGraph(nodes, edges, { x: 5, y: 6, zoom: 2 }, loaded.original);
    expect(saved.nodes[1]).toEqual({
      id: "tpl",
      type: "TextTemplate",
      position: { x: 300, y: 40 },
      data: { template: "Bye" },
    });
    // React Flow's selection is not written unless the stored node had the field.
    expect(saved.nodes[2]).toEqual({
      id: "Delay_1",
      type: "Delay",
      position: { x: 1, y: 2 },
      data: {},
    });
    expect(saved.edges[2]).toEqual({
      id: "e3",
      source: "tpl",
      target: "Delay_1",
      sourceHandle: "output",
      targetHandle: "text",
    });
    expect(saved.viewport).toEqual({ x: 5, y: 6, zoom: 2 });
    expect(saved.extra_top_level).toEqual({ kept: [1, 2, 3] });
  });

  it("drops deleted nodes and edges", () => {
    const loaded = fromGraph(structuredClone(stored));
    const saved = toGraph(loaded.nodes.slice(0, 1), [], loaded.viewport, loaded.original);
    expect(saved.nodes.map((n) => n.id)).toEqual(["in"]);
    expect(saved.edges).toEqual([]);
  });

  it("builds a graph from scratch", () => {
    const saved = toGraph(
      [{ id: "a", type: "TextInput", position: { x: 0, y: 0 }, data: { text: "x" } }],
      [],
      { x: 0, y: 0, zoom: 1 },
      null,
    );
    expect(saved).toEqual({
      nodes: [{ id: "a", type: "TextInput", position: { x: 0, y: 0 }, data: { text: "x" } }],
      edges: [],
      viewport: { x: 0, y: 0, zoom: 1 },
    });
  });
});

describe("newNodeId", () => {
  it("numbers nodes of a type from 1, skipping ids in use", () => {
    expect(newNodeId("RenderText", [])).toBe("RenderText_1");
    expect(newNodeId("RenderText", ["RenderText_1", "RenderText_2"])).toBe("RenderText_3");
  });
});
