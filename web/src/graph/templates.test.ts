import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { TEMPLATES, unavailableTypes } from "./templates";

// The files as text, read apart from the JSON import the module uses.
const RAW = import.meta.glob<string>("../../../examples/*.json", {
  eager: true,
  query: "?raw",
  import: "default",
});

describe("TEMPLATES", () => {
  it("bundles every example workflow, with its name and graph as the file has them", () => {
    const names = Object.keys(RAW).map((p) => p.replace(/^.*\//, "").slice(0, -5));
    expect(names.length).toBeGreaterThanOrEqual(6);
    expect(TEMPLATES.map((t) => t.id).sort()).toEqual(names.sort());
    for (const t of TEMPLATES) {
      const raw = RAW[`../../../examples/${t.id}.json`] ?? "{}";
      const file = JSON.parse(raw) as { name: string; graph_json: unknown };
      expect(t.name).toBe(file.name);
      expect(t.graph).toEqual(file.graph_json);
      expect(t.graph.nodes.length).toBeGreaterThan(0);
    }
  });

  it("lists the smallest graph first", () => {
    const sizes = TEMPLATES.map((t) => t.graph.nodes.length);
    expect(sizes).toEqual([...sizes].sort((a, b) => a - b));
  });
});

describe("unavailableTypes", () => {
  it("names the node types the server cannot run", () => {
    const [first] = TEMPLATES;
    if (!first) throw new Error("no templates");
    const types = [...new Set(first.graph.nodes.map((n) => n.type))];
    const [off, ...on] = types;
    const catalog = new Map<string, NodeType>(
      on.map((type) => [type, { type, title: type, available: true } as NodeType]),
    );
    expect(unavailableTypes(first, catalog)).toEqual([off]);
    if (off) catalog.set(off, { type: off, title: "Off title", available: false } as NodeType);
    expect(unavailableTypes(first, catalog)).toEqual(["Off title"]);
  });
});
