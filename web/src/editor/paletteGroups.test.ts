import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { paletteGroups } from "./paletteGroups";

function type(name: string, category: string, how: "ok" | "credential" | "blocked"): NodeType {
  return {
    type: name,
    title: name,
    category,
    available: how === "ok",
    unavailable_reason: how === "ok" ? null : "no provider configured",
    params_schema: how === "credential" ? { properties: { credential: {} } } : {},
  } as unknown as NodeType;
}

const TYPES = [
  type("LLM", "ai", "credential"),
  type("Gone", "ai", "blocked"),
  type("Echo", "ai", "ok"),
  type("Template", "text", "ok"),
  type("Render", "image", "ok"),
];

describe("paletteGroups", () => {
  it("opens on what works here: ready categories first, ready types first", () => {
    const groups = paletteGroups(TYPES, false);
    expect(groups.map(([c]) => c)).toEqual(["image", "text", "ai"]);
    expect(groups[2]?.[1].map((t) => t.type)).toEqual(["Echo", "LLM", "Gone"]);
  });

  it("keeps the search's order while searching", () => {
    const groups = paletteGroups([TYPES[3], TYPES[0]] as NodeType[], true);
    expect(groups.map(([c]) => c)).toEqual(["text", "ai"]);
  });
});
