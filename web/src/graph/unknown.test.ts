import { describe, expect, it } from "vitest";
import type { GraphJson } from "../api/types";
import { catalogMap } from "../api/queries";
import { fromGraph, toGraph } from "./convert";
import { unknownTitle } from "./unknown";

// A workflow saved while the "acme" package was installed, opened after it was removed: the
// catalog no longer lists acme.Watermark at all.
const stored: GraphJson = {
  nodes: [
    { id: "img", type: "RenderText", position: { x: 0, y: 0 }, data: { text: "hi" } },
    {
      id: "mark",
      type: "acme.Watermark",
      position: { x: 320.5, y: -12 },
      data: {
        text: "© studio",
        opacity: 0.35,
        corner: "bottom-right",
        nested: { colour: [255, 255, 255], list: [1, null, "x"] },
        empty: null,
      },
      width: 200,
      acme_extra: { kept: true },
    },
  ],
  edges: [
    { id: "e1", source: "img", target: "mark", targetHandle: "image" },
    { id: "e2", source: "mark", target: "img", sourceHandle: "output", targetHandle: null },
  ],
  viewport: { x: 4, y: -8, zoom: 0.9 },
};

describe("a node whose type is not in the catalog", () => {
  const catalog = catalogMap([]);

  it("is not in the catalog, and is titled by its type", () => {
    expect(catalog.has("acme.Watermark")).toBe(false);
    expect(unknownTitle("acme.Watermark")).toBe("Unknown node (acme.Watermark)");
  });

  it("goes graph_json -> canvas -> graph_json with its type, data and fields exactly kept", () => {
    const original = structuredClone(stored);
    const loaded = fromGraph(original);
    const mark = loaded.nodes.find((n) => n.id === "mark");
    expect(mark?.type).toBe("acme.Watermark");
    expect(mark?.data).toEqual(stored.nodes[1]?.data);
    // What React Flow adds while showing it, and a move of the *other* node.
    const shown = loaded.nodes.map((n) => ({
      ...n,
      measured: { width: 200, height: 80 },
      selected: n.id === "mark",
      position: n.id === "img" ? { x: 10, y: 20 } : n.position,
    }));
    const saved = toGraph(shown, loaded.edges, loaded.viewport, loaded.original);
    expect(saved.nodes[1]).toEqual(stored.nodes[1]);
    expect(saved.edges).toEqual(stored.edges);
    expect(saved.nodes[0]?.position).toEqual({ x: 10, y: 20 });
    // Unchanged, the whole graph comes back equal.
    const again = fromGraph(structuredClone(stored));
    expect(toGraph(again.nodes, again.edges, again.viewport, again.original)).toEqual(stored);
  });

  it("does not share its data object with the stored graph", () => {
    const original = structuredClone(stored);
    const loaded = fromGraph(original);
    const mark = loaded.nodes.find((n) => n.id === "mark");
    if (!mark) throw new Error("mark missing");
    mark.data.text = "changed on the canvas";
    expect(original.nodes[1]?.data.text).toBe("© studio");
  });
});
