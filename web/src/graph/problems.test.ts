import { describe, expect, it } from "vitest";
import { placeProblems } from "./problems";
import type { GraphJson } from "../api/types";

const sent: GraphJson = {
  nodes: [
    { id: "in", type: "TextInput", position: { x: 0, y: 0 }, data: {} },
    { id: "tts", type: "TextToSpeech", position: { x: 0, y: 0 }, data: {} },
  ],
  edges: [{ id: "e1", source: "in", target: "nowhere" }],
  viewport: { x: 0, y: 0, zoom: 1 },
};

describe("placeProblems", () => {
  it("puts each pointer on the node or edge it names", () => {
    const placed = placeProblems(
      [
        { pointer: "/graph_json/nodes/1", message: "required input 'text' is not connected" },
        { pointer: "/graph_json/nodes/1/data/speed", message: "at most 2" },
        { pointer: "/graph_json/edges/0/target", message: "not a node" },
        { pointer: "/graph_json/viewport/x", message: "must be a number" },
        { pointer: "/graph_json/nodes/9", message: "out of range" },
      ],
      sent,
    );
    expect(placed.nodes.get("tts")).toEqual([
      "required input 'text' is not connected",
      "at most 2",
    ]);
    expect(placed.nodes.has("in")).toBe(false);
    expect(placed.edges.get("e1")).toEqual(["not a node"]);
    expect(placed.general).toEqual(["must be a number", "out of range"]);
  });
});

describe("placing a save's warnings", () => {
  it("puts a warning about a node's type on that node", () => {
    const placed = placeProblems(
      [
        {
          pointer: "/graph_json/nodes/1/type",
          message: "TextToSpeech is unavailable: no provider",
        },
      ],
      sent,
    );
    expect(placed.nodes.get("tts")).toEqual(["TextToSpeech is unavailable: no provider"]);
    expect(placed.nodes.has("in")).toBe(false);
    expect(placed.general).toEqual([]);
  });
});
