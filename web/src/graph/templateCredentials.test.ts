import { describe, expect, it } from "vitest";
import type { GraphJson, NodeType } from "../api/types";
import { credentialSlots, withCredentials } from "./templateCredentials";
import { TEMPLATES } from "./templates";

const COMFY = {
  type: "ComfyUIWorkflow",
  title: "ComfyUI workflow",
  available: true,
  credential_kinds: ["comfyui"],
  params_schema: { properties: { credential: { type: "string" } }, required: ["credential"] },
} as unknown as NodeType;
const TEXT = { type: "TextInput", title: "Text", available: true, params_schema: {} } as NodeType;
const CATALOG = new Map([
  [COMFY.type, COMFY],
  [TEXT.type, TEXT],
]);
const ID = "6f1c2a7e-0d4b-4a8e-9f3c-2b5d7e9a1c3f";

function graph(credentials: (string | undefined)[]): GraphJson {
  return {
    nodes: [
      { id: "in", type: "TextInput", position: { x: 0, y: 0 }, data: { text: "x" } },
      ...credentials.map((credential, i) => ({
        id: `c${i}`,
        type: "ComfyUIWorkflow",
        position: { x: 0, y: 0 },
        data: credential === undefined ? {} : { credential },
      })),
    ],
    edges: [],
    viewport: { x: 0, y: 0, zoom: 1 },
  } as GraphJson;
}

describe("credentialSlots", () => {
  it("asks once for each placeholder, with the kinds its nodes take", () => {
    const slots = credentialSlots(graph(["REPLACE-ME", "REPLACE-ME", "OTHER"]), CATALOG);
    expect(slots).toEqual([
      { placeholder: "REPLACE-ME", kinds: ["comfyui"], nodeIds: ["c0", "c1"] },
      { placeholder: "OTHER", kinds: ["comfyui"], nodeIds: ["c2"] },
    ]);
  });

  it("leaves alone a credential id, an empty param and an unknown node type", () => {
    expect(credentialSlots(graph([ID, "", undefined]), CATALOG)).toEqual([]);
    expect(credentialSlots(graph(["REPLACE-ME"]), new Map([[TEXT.type, TEXT]]))).toEqual([]);
  });

  it("finds the provider examples' placeholders", () => {
    const comfy = TEMPLATES.find((t) => t.id === "comfyui-text-to-image");
    if (!comfy) throw new Error("no ComfyUI example");
    const types = new Map(comfy.graph.nodes.map((n) => [n.type, { ...COMFY, type: n.type }]));
    const slots = credentialSlots(comfy.graph, types);
    expect(slots.map((s) => s.placeholder)).toEqual(["REPLACE-WITH-YOUR-COMFYUI-CREDENTIAL-ID"]);
  });
});

describe("withCredentials", () => {
  it("puts the chosen id wherever its placeholder stood", () => {
    const filled = withCredentials(graph(["REPLACE-ME", "OTHER", "REPLACE-ME"]), {
      "REPLACE-ME": ID,
    });
    const values = filled.nodes.map((n) => (n.data as { credential?: string }).credential);
    expect(values).toEqual([undefined, ID, "OTHER", ID]);
  });
});
