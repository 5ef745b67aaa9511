import { describe, expect, it } from "vitest";
import {
  edgeLabel,
  edgeToNew,
  firstOutput,
  handleKey,
  outputsOf,
  refusal,
  refusedHandles,
  targetInput,
} from "./kinds";
import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "./convert";

function spec(
  type: string,
  output: NodeType["output"]["kind"],
  inputs: NodeType["inputs"],
): NodeType {
  return {
    type,
    version: 1,
    category: "test",
    title: type,
    description: "",
    inputs,
    output: { kind: output, content_type: "x" },
    params_schema: {},
    cost: { credits: 1, per_second: 0 },
    available: true,
    status: "available",
    unavailable_reason: null,
  };
}

const catalog = new Map<string, NodeType>([
  ["TextInput", spec("TextInput", "text", [])],
  [
    "RenderText",
    spec("RenderText", "image", [{ name: "text", kind: "text", required: true, multiple: false }]),
  ],
  [
    "ImageAudioToVideo",
    spec("ImageAudioToVideo", "video", [
      { name: "image", kind: "image", required: true, multiple: false },
      { name: "audio", kind: "audio", required: true, multiple: false },
    ]),
  ],
  [
    "Concat",
    spec("Concat", "text", [{ name: "texts", kind: "text", required: true, multiple: true }]),
  ],
]);
const node = (id: string, type: string): FlowNode => ({
  id,
  type,
  position: { x: 0, y: 0 },
  data: {},
});
const nodes = [
  node("in", "TextInput"),
  node("img", "RenderText"),
  node("vid", "ImageAudioToVideo"),
  node("cat", "Concat"),
];

describe("refusal", () => {
  it("allows a matching kind", () => {
    expect(
      refusal({ source: "in", target: "img", targetHandle: "text" }, nodes, [], catalog),
    ).toBeNull();
    expect(
      refusal({ source: "img", target: "vid", targetHandle: "image" }, nodes, [], catalog),
    ).toBeNull();
  });

  it("refuses a kind mismatch and says which kinds", () => {
    const why = refusal({ source: "in", target: "vid", targetHandle: "image" }, nodes, [], catalog);
    expect(why).toContain("outputs text");
    expect(why).toContain("takes image");
  });

  it("refuses a second edge into a single input, not into a multiple one", () => {
    const edges: FlowEdge[] = [
      { id: "e", source: "in", target: "img", targetHandle: "text" },
      { id: "f", source: "in", target: "cat", targetHandle: "texts" },
    ];
    expect(
      refusal({ source: "in", target: "img", targetHandle: "text" }, nodes, edges, catalog),
    ).toMatch(/already has a connection/);
    expect(
      refusal({ source: "in", target: "cat", targetHandle: "texts" }, nodes, edges, catalog),
    ).toBeNull();
  });

  it("refuses self-loops and cycles", () => {
    expect(refusal({ source: "cat", target: "cat" }, nodes, [], catalog)).toMatch(/itself/);
    const edges: FlowEdge[] = [{ id: "e", source: "cat", target: "img", targetHandle: "text" }];
    const looping = [...nodes, node("cat2", "Concat")];
    const more: FlowEdge[] = [
      ...edges,
      { id: "g", source: "cat2", target: "cat", targetHandle: "texts" },
    ];
    expect(
      refusal({ source: "cat", target: "cat2", targetHandle: "texts" }, looping, more, catalog),
    ).toMatch(/cycle/);
  });

  it("resolves an omitted handle to the only input", () => {
    expect(targetInput(catalog.get("RenderText") as NodeType, null)).toBe("text");
    expect(targetInput(catalog.get("ImageAudioToVideo") as NodeType, null)).toBeNull();
  });
});

describe("refusedHandles", () => {
  it("marks every input a dragged output may not enter", () => {
    const refused = refusedHandles(
      { nodeId: "in", handleId: "output", type: "source" },
      nodes,
      [],
      catalog,
    );
    expect([...refused].sort()).toEqual(["vid:audio", "vid:image"]);
  });

  it("marks a taken single input and the dragging node's own inputs", () => {
    const edges: FlowEdge[] = [{ id: "e", source: "in", target: "img", targetHandle: "text" }];
    const refused = refusedHandles(
      { nodeId: "cat", handleId: "output", type: "source" },
      nodes,
      edges,
      catalog,
    );
    expect(refused).toContain(handleKey("img", "text"));
    expect(refused).toContain(handleKey("cat", "texts"));
    expect(refused).not.toContain(handleKey("vid", "text"));
  });

  it("marks outputs of the wrong kind when dragged from an input", () => {
    const refused = refusedHandles(
      { nodeId: "vid", handleId: "image", type: "target" },
      nodes,
      [],
      catalog,
    );
    // Every node's error output is json: no image input takes it.
    expect([...refused].sort()).toEqual([
      "cat:error",
      "cat:output",
      "img:error",
      "in:error",
      "in:output",
      "vid:error",
      "vid:output",
    ]);
  });
});

describe("edgeToNew", () => {
  it("connects a dragged output to the first input of the new node that takes its kind", () => {
    const from = { nodeId: "img", handleId: "output", type: "source" } as const;
    expect(edgeToNew(from, "new", "ImageAudioToVideo", nodes, [], catalog)).toEqual({
      source: "img",
      target: "new",
      sourceHandle: "output",
      targetHandle: "image",
    });
    expect(edgeToNew(from, "new", "RenderText", nodes, [], catalog)).toBeNull();
  });

  it("connects the new node's output to a dragged input of its kind", () => {
    const from = { nodeId: "img", handleId: "text", type: "target" } as const;
    expect(edgeToNew(from, "new", "TextInput", nodes, [], catalog)).toMatchObject({
      source: "new",
      target: "img",
      targetHandle: "text",
    });
    expect(edgeToNew(from, "new", "RenderText", nodes, [], catalog)).toBeNull();
  });
});

describe("outputs", () => {
  const ifSpec: NodeType = {
    ...spec("If", "text", [{ name: "text", kind: "text", required: true, multiple: false }]),
    outputs: [
      { name: "true", kind: "text", content_type: "text/plain", role: "branch" },
      { name: "false", kind: "text", content_type: "text/plain", role: "branch" },
      { name: "error", kind: "json", content_type: "text/plain", role: "error" },
    ],
  };
  const switchSpec: NodeType = {
    ...ifSpec,
    type: "Switch",
    outputs: [
      { name: "default", kind: "text", content_type: "text/plain", role: "branch" },
      { name: "error", kind: "json", content_type: "text/plain", role: "error" },
    ],
    outputs_from_param: "cases",
  };
  const withBranches = new Map([...catalog, ["If", ifSpec], ["Switch", switchSpec]]);
  const graphNodes = [...nodes, node("if", "If")];

  it("lists a Switch's cases before its default and error", () => {
    const data = { cases: [{ name: "billing" }, { name: "urgent" }] };
    expect(outputsOf(switchSpec, data).map((o) => o.name)).toEqual([
      "billing",
      "urgent",
      "default",
      "error",
    ]);
    expect(firstOutput(switchSpec, data)).toBe("billing");
  });

  it("gives a node without a list its output and error", () => {
    const found = outputsOf(spec("TextInput", "text", []));
    expect(found.map((o) => [o.name, o.kind])).toEqual([
      ["output", "text"],
      ["error", "json"],
    ]);
  });

  it("lets a branch and an error output feed a text input, not an image one", () => {
    const attempt = { source: "if", target: "img", sourceHandle: "true", targetHandle: "text" };
    expect(refusal(attempt, graphNodes, [], withBranches)).toBeNull();
    const error = { ...attempt, sourceHandle: "error" };
    expect(refusal(error, graphNodes, [], withBranches)).toBeNull();
    const audio = { source: "if", target: "vid", sourceHandle: "error", targetHandle: "audio" };
    expect(refusal(audio, graphNodes, [], withBranches)).toMatch(/outputs json/);
  });

  it("labels edges by the branch they leave", () => {
    expect(edgeLabel("true")).toBe("true");
    expect(edgeLabel("error")).toBe("error");
    expect(edgeLabel("output")).toBeUndefined();
    expect(edgeLabel("text")).toBeUndefined();
    expect(edgeLabel(null)).toBeUndefined();
  });
});
