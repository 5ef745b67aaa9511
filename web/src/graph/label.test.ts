import { describe, expect, it } from "vitest";
import { LABEL_MAX, labelProblem, labelsOf, nodeLabel, shownName } from "./label";
import { diffGraphs } from "../versions/diff";
import type { GraphJson } from "../api/types";

const graph = (label?: unknown): GraphJson =>
  ({
    nodes: [
      {
        id: "a",
        type: "TextInput",
        position: { x: 0, y: 0 },
        data: { text: "hi", ...(label === undefined ? {} : { label }) },
      },
    ],
    edges: [],
    viewport: { x: 0, y: 0, zoom: 1 },
  }) as GraphJson;

describe("node labels", () => {
  it("reads a name, never a blank one or another type", () => {
    expect(nodeLabel({ label: "Prompt" })).toBe("Prompt");
    expect(nodeLabel({ label: "  " })).toBeUndefined();
    expect(nodeLabel({ label: 3 })).toBeUndefined();
    expect(shownName({ id: "a", data: {} })).toBe("a");
    expect(labelsOf(graph("Prompt")).get("a")).toBe("Prompt");
  });

  it("refuses what the server refuses", () => {
    expect(labelProblem("")).toBeNull();
    expect(labelProblem("Füchse ✍")).toBeNull();
    expect(labelProblem("x".repeat(LABEL_MAX))).toBeNull();
    expect(labelProblem("x".repeat(LABEL_MAX + 1))).toMatch(/at most/);
    expect(labelProblem("   ")).toMatch(/spaces/);
    expect(labelProblem("two\nlines")).toMatch(/one line/);
    expect(labelProblem("bidi\u202eflip")).toMatch(/one line/);
  });

  it("shows a rename in a version diff as a rename, not as a param", () => {
    const diff = diffGraphs(graph("Old"), graph("New"));
    expect(diff.changed).toHaveLength(1);
    expect(diff.changed[0]?.params).toEqual([]);
    expect(diff.changed[0]?.renamed).toEqual({ before: "Old", after: "New" });
    expect(diffGraphs(graph(), graph("Named")).changed[0]?.renamed).toEqual({
      before: undefined,
      after: "Named",
    });
  });
});
