import { describe, expect, it } from "vitest";
import { inputFields } from "./runInput";
import type { FlowNode } from "../graph/convert";

const n = (id: string, type: string, data: Record<string, unknown>): FlowNode => ({
  id,
  type,
  position: { x: 0, y: 0 },
  data,
});

describe("inputFields", () => {
  it("asks once per key, pre-filled with the node's text", () => {
    const fields = inputFields([
      n("a", "TextInput", { text: "hello" }),
      n("b", "TextInput", { text: "ignored: same key" }),
      n("c", "TextInput", { key: "title", text: "My title" }),
      n("d", "TextInput", { key: null }),
      n("e", "RenderText", { text: "not an input" }),
    ]);
    expect(fields).toEqual([
      { key: "text", initial: "hello" },
      { key: "title", initial: "My title" },
    ]);
  });

  it("asks nothing of a graph without TextInput nodes", () => {
    expect(inputFields([n("x", "Delay", {})])).toEqual([]);
  });
});
