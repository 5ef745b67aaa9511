import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { withHttpRequestKinds } from "./httpRequest";
import { refusal } from "./kinds";
import { specKey } from "./subworkflow";

const spec = (type: string, kind: string, inputs: NodeType["inputs"] = []): NodeType =>
  ({ type, title: type, inputs, output: { kind, content_type: "x" } }) as unknown as NodeType;

const imageIn = [{ name: "image", kind: "image", required: true, multiple: false }];
const textIn = [{ name: "text", kind: "text", required: true, multiple: false }];
const catalog = withHttpRequestKinds(
  new Map<string, NodeType>([
    ["HttpRequest", spec("HttpRequest", "text")],
    ["Resize", spec("Resize", "image", imageIn as NodeType["inputs"])],
    ["Upper", spec("Upper", "text", textIn as NodeType["inputs"])],
  ]),
);

describe("HttpRequest nodes in the editor", () => {
  it("output the kind their output param names", () => {
    expect(specKey({ type: "HttpRequest", data: { output: "image" } })).toBe("HttpRequest:image");
    expect(specKey({ type: "HttpRequest", data: { output: "json" } })).toBe("HttpRequest");
    expect(catalog.get("HttpRequest:video")?.output.kind).toBe("video");
    const nodes = [
      { id: "h", type: "HttpRequest", data: { output: "image" } },
      { id: "t", type: "HttpRequest", data: {} },
      { id: "r", type: "Resize", data: {} },
      { id: "u", type: "Upper", data: {} },
    ] as never;
    const edge = (source: string, target: string) => ({ source, target });
    expect(refusal(edge("h", "r"), nodes, [], catalog)).toBeNull();
    expect(refusal(edge("h", "u"), nodes, [], catalog)).not.toBeNull();
    expect(refusal(edge("t", "u"), nodes, [], catalog)).toBeNull();
    expect(refusal(edge("t", "r"), nodes, [], catalog)).not.toBeNull();
  });
});
