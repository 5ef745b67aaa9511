import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { withApprovalKinds } from "./approval";
import { refusal } from "./kinds";
import { specKey } from "./subworkflow";

const spec = (type: string, kind: string, inputs: NodeType["inputs"] = []): NodeType =>
  ({
    type,
    title: type,
    inputs,
    output: { kind, content_type: "x" },
  }) as unknown as NodeType;

const catalog = withApprovalKinds(
  new Map<string, NodeType>([
    ["TextInput", spec("TextInput", "text")],
    ["ImageGen", spec("ImageGen", "image")],
    [
      "Approval",
      spec("Approval", "text", [{ name: "input", kind: "text", required: true, multiple: false }]),
    ],
  ]),
);

describe("Approval nodes in the editor", () => {
  it("take and give the kind their param names", () => {
    const gate = { id: "g", type: "Approval", data: { kind: "image" } };
    expect(specKey(gate)).toBe("Approval:image");
    expect(catalog.get("Approval:image")?.output.kind).toBe("image");
    expect(catalog.get("Approval:image")?.inputs[0]?.kind).toBe("image");
    expect(specKey({ type: "Approval", data: {} })).toBe("Approval");
    const nodes = [
      gate,
      { id: "i", type: "ImageGen", data: {} },
      { id: "t", type: "TextInput", data: {} },
    ] as never;
    const attempt = (source: string) => ({ source, target: "g", targetHandle: "input" });
    expect(refusal(attempt("i"), nodes, [], catalog)).toBeNull();
    expect(refusal(attempt("t"), nodes, [], catalog)).not.toBeNull();
  });
});
