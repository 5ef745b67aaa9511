import { describe, expect, it } from "vitest";
import { isLongText, outputNodeIds, outputsFirst, staleNodeIds } from "./outputs";

const graph = {
  nodes: [
    { id: "a", type: "TextInput", data: { text: "hi" } },
    { id: "b", type: "Uppercase", data: {} },
    { id: "c", type: "TextToSpeech", data: { voice: "x" } },
    { id: "d", type: "Concat", data: { sep: " " } },
  ],
  edges: [
    { source: "a", target: "b", targetHandle: "text" },
    { source: "a", target: "c", targetHandle: "text" },
  ],
};

describe("outputNodeIds", () => {
  it("lists the nodes no edge leaves, in graph order", () => {
    expect(outputNodeIds(graph)).toEqual(["b", "c", "d"]);
  });
  it("is every node of a graph without edges", () => {
    expect(outputNodeIds({ nodes: graph.nodes, edges: [] })).toEqual(["a", "b", "c", "d"]);
  });
  it("never takes a sticky note for an output", () => {
    const noted = { ...graph, nodes: [...graph.nodes, { id: "n", type: "Note", data: {} }] };
    expect(outputNodeIds(noted)).toEqual(["b", "c", "d"]);
  });
});

describe("outputsFirst", () => {
  const runs = [{ node_id: "a" }, { node_id: "b" }, { node_id: "c" }];
  it("splits outputs from the other nodes, keeping the run's order", () => {
    expect(outputsFirst(runs, new Set(["c", "b"]))).toEqual({
      outputs: [{ node_id: "b" }, { node_id: "c" }],
      others: [{ node_id: "a" }],
    });
  });
  it("keeps the run's order while the graph is unknown", () => {
    expect(outputsFirst(runs, null)).toEqual({ outputs: [], others: runs });
  });
});

describe("isLongText", () => {
  it("folds long or many-lined text only", () => {
    expect(isLongText("short")).toBe(false);
    expect(isLongText("x".repeat(601))).toBe(true);
    expect(isLongText("a\n".repeat(13))).toBe(true);
  });
});

describe("staleNodeIds", () => {
  const clone = () => structuredClone(graph);
  it("is empty for the same graph, params' key order and positions aside", () => {
    const now = clone();
    now.nodes[2] = { id: "c", data: { voice: "x" }, type: "TextToSpeech" };
    expect(staleNodeIds(graph, now)).toEqual(new Set());
  });
  it("marks an edited node and everything downstream of it", () => {
    const now = clone();
    now.nodes[0]!.data = { text: "changed" };
    expect(staleNodeIds(graph, now)).toEqual(new Set(["a", "b", "c"]));
  });
  it("marks only the edited node when nothing follows it", () => {
    const now = clone();
    now.nodes[2]!.data = { voice: "y" };
    expect(staleNodeIds(graph, now)).toEqual(new Set(["c"]));
  });
  it("marks a node whose inputs were rewired, not nodes added since", () => {
    const now = clone();
    now.nodes.push({ id: "e", type: "TextInput", data: { text: "new" } });
    now.edges[0] = { source: "e", target: "b", targetHandle: "text" };
    expect(staleNodeIds(graph, now)).toEqual(new Set(["b"]));
  });
});
