import { describe, expect, it } from "vitest";
import type { GraphJson } from "../api/types";
import { diffGraphs, onlyLayout, sameValue, showValue } from "./diff";

const base: GraphJson = {
  nodes: [
    { id: "in", type: "TextInput", position: { x: 0, y: 0 }, data: { text: "world" } },
    {
      id: "tpl",
      type: "TextTemplate",
      position: { x: 200, y: 0 },
      data: { template: "Hello {{ text }}", opts: { a: 1, b: [1, 2] } },
    },
  ],
  edges: [{ id: "e1", source: "in", target: "tpl" }],
  viewport: { x: 0, y: 0, zoom: 1 },
};

function clone(graph: GraphJson): GraphJson {
  return JSON.parse(JSON.stringify(graph)) as GraphJson;
}

describe("diffGraphs", () => {
  it("finds nothing between equal graphs, whatever the key order or viewport", () => {
    const same = clone(base);
    same.nodes[1]!.data = { opts: { b: [1, 2], a: 1 }, template: "Hello {{ text }}" };
    same.viewport = { x: 50, y: 9, zoom: 2 };
    same.edges[0]!.id = "another-id";
    const diff = diffGraphs(base, same, { before: "wf", after: "wf" });
    expect(diff).toEqual({
      added: [],
      removed: [],
      changed: [],
      edgesAdded: [],
      edgesRemoved: [],
    });
    expect(onlyLayout(diff)).toBe(true);
  });

  it("lists param changes by name, with both values", () => {
    const after = clone(base);
    after.nodes[1]!.data = { template: "Bye {{ text }}", opts: { a: 1, b: [1, 2] }, extra: 3 };
    after.nodes[0]!.data = {};
    const diff = diffGraphs(base, after);
    expect(diff.changed).toEqual([
      {
        id: "in",
        type: "TextInput",
        params: [{ name: "text", before: "world", after: undefined }],
        moved: false,
      },
      {
        id: "tpl",
        type: "TextTemplate",
        params: [
          { name: "extra", before: undefined, after: 3 },
          { name: "template", before: "Hello {{ text }}", after: "Bye {{ text }}" },
        ],
        moved: false,
      },
    ]);
    expect(onlyLayout(diff)).toBe(false);
  });

  it("finds added and removed nodes and connections, a type change and a move", () => {
    const after = clone(base);
    after.nodes = [
      { id: "in", type: "TextInput", position: { x: 10, y: 0 }, data: { text: "world" } },
      { id: "img", type: "RenderText", position: { x: 400, y: 0 }, data: {} },
      { id: "tpl", type: "TextUpper", position: { x: 200, y: 0 }, data: base.nodes[1]!.data },
    ];
    after.edges = [{ id: "e9", source: "in", target: "img" }];
    const diff = diffGraphs(base, after, { before: "old", after: "new" });
    expect(diff.name).toEqual({ before: "old", after: "new" });
    expect(diff.added.map((n) => n.id)).toEqual(["img"]);
    expect(diff.removed).toEqual([]);
    expect(diff.changed).toEqual([
      { id: "in", type: "TextInput", params: [], moved: true },
      { id: "tpl", type: "TextUpper", typeBefore: "TextTemplate", params: [], moved: false },
    ]);
    expect(diff.edgesAdded.map((e) => e.target)).toEqual(["img"]);
    expect(diff.edgesRemoved.map((e) => e.id)).toEqual(["e1"]);
    const back = diffGraphs(after, base);
    expect(back.removed.map((n) => n.id)).toEqual(["img"]);
    expect(back.edgesAdded.map((e) => e.id)).toEqual(["e1"]);
  });

  it("tells connections apart by their handles", () => {
    const after = clone(base);
    after.edges = [{ id: "e1", source: "in", target: "tpl", targetHandle: "text" }];
    const diff = diffGraphs(base, after);
    expect(diff.edgesAdded).toHaveLength(1);
    expect(diff.edgesRemoved).toHaveLength(1);
  });
});

describe("sameValue and showValue", () => {
  it("compares JSON by content", () => {
    expect(sameValue({ a: [1, { b: null }] }, { a: [1, { b: null }] })).toBe(true);
    expect(sameValue([1, 2], [2, 1])).toBe(false);
    expect(sameValue({ a: 1 }, { a: 1, b: undefined })).toBe(true);
    expect(sameValue(null, {})).toBe(false);
    expect(sameValue(1, "1")).toBe(false);
  });

  it("shows values on one short line", () => {
    expect(showValue("hi")).toBe('"hi"');
    expect(showValue(undefined)).toBe("(not set)");
    expect(showValue({ a: 1 })).toBe('{"a":1}');
    expect(showValue("x".repeat(200), 10)).toBe('"xxxxxxxx…');
  });
});
