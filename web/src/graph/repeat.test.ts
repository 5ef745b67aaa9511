import { describe, expect, it } from "vitest";
import { iterationLabel, repeatBounds } from "./repeat";

const graph = {
  nodes: [
    { id: "in", type: "TextInput", data: {} },
    { id: "rep", type: "Repeat", data: { max_iterations: 5 } },
    { id: "gen", type: "LLMText", data: {} },
    { id: "judge", type: "LLMText", data: {} },
    { id: "until", type: "Until", data: { operator: "gte", value: 7, path: "score" } },
    { id: "after", type: "TextToImage", data: {} },
  ],
  edges: [
    { source: "in", target: "rep" },
    { source: "rep", target: "gen" },
    { source: "gen", target: "judge" },
    { source: "judge", target: "until" },
    { source: "until", target: "after" },
  ],
};

describe("repeatBounds", () => {
  it("gives the Repeat, its region and its Until the Repeat's max_iterations", () => {
    const bounds = repeatBounds(graph);
    expect([...bounds.keys()].sort()).toEqual(["gen", "judge", "rep", "until"]);
    expect(bounds.get("judge")).toBe(5);
  });
  it("stops at the Until: what follows runs once", () => {
    expect(repeatBounds(graph).has("after")).toBe(false);
    expect(repeatBounds(graph).has("in")).toBe(false);
  });
  it("uses the server's default when max_iterations is not set", () => {
    const nodes = graph.nodes.map((n) => (n.id === "rep" ? { ...n, data: {} } : n));
    expect(repeatBounds({ nodes, edges: graph.edges }).get("gen")).toBe(3);
  });
  it("is empty without a Repeat", () => {
    const nodes = graph.nodes.filter((n) => n.type !== "Repeat");
    expect(repeatBounds({ nodes, edges: graph.edges }).size).toBe(0);
  });
});

describe("iterationLabel", () => {
  it("says which iteration of how many", () => {
    expect(iterationLabel(2, 5)).toBe("iteration 2/5");
  });
  it("never shows fewer as the bound than the iterations run (a param edited since)", () => {
    expect(iterationLabel(3, 2)).toBe("iteration 3/3");
  });
});
