import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { childInterface, specKey, withChildren } from "./subworkflow";
import { refusal } from "./kinds";

const spec = (type: string, kind: string, inputs: NodeType["inputs"] = []): NodeType =>
  ({
    type,
    title: type,
    inputs,
    output: { kind, content_type: "x" },
  }) as unknown as NodeType;

const catalog = new Map<string, NodeType>([
  ["TextInput", spec("TextInput", "text")],
  [
    "ImageGen",
    spec("ImageGen", "image", [{ name: "text", kind: "text", required: true, multiple: false }]),
  ],
  ["Workflow", spec("Workflow", "text")],
]);

describe("sub-workflows in the editor", () => {
  const child = {
    nodes: [
      { id: "a", type: "TextInput", data: { key: "topic" } },
      { id: "b", type: "TextInput", data: {} },
      { id: "img", type: "ImageGen", data: {} },
    ],
    edges: [
      { source: "a", target: "img" },
      { source: "b", target: "img" },
    ],
  };

  it("takes the child's TextInputs as inputs and its one output's kind", () => {
    expect(childInterface(child, catalog)).toEqual({ inputs: ["topic", "text"], output: "image" });
  });

  it("leaves the child's notes and groups out of its outputs", () => {
    const framed = {
      ...child,
      nodes: [
        { id: "G", type: "Group", data: { label: "All" } },
        ...child.nodes,
        { id: "memo", type: "Note", data: { text: "x" } },
      ],
    };
    expect(childInterface(framed, catalog).output).toBe("image");
  });

  it("binds a Workflow node to its child, for drawing and for checking connections", () => {
    const bound = withChildren(catalog, new Map([["wf1", childInterface(child, catalog)]]));
    const node = {
      id: "sub",
      type: "Workflow",
      position: { x: 0, y: 0 },
      data: { workflow_id: "wf1" },
    };
    expect(specKey(node)).toBe("Workflow:wf1");
    expect(bound.get("Workflow:wf1")?.inputs.map((i) => i.name)).toEqual(["topic", "text"]);
    const source = { id: "in", type: "TextInput", position: { x: 0, y: 0 }, data: {} };
    const nodes = [source, node];
    expect(
      refusal({ source: "in", target: "sub", targetHandle: "topic" }, nodes, [], bound),
    ).toBeNull();
    expect(
      refusal({ source: "in", target: "sub", targetHandle: "colour" }, nodes, [], bound),
    ).toMatch(/no such input/);
  });
});
