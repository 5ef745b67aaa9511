import { describe, expect, it } from "vitest";
import {
  importedParams,
  nodeOrder,
  parseComfyWorkflow,
  proposeBindings,
  type ComfyWorkflow,
} from "./comfyui";

// ComfyUI's default text-to-image workflow as "Export (API)" saves it.
const DEFAULT: ComfyWorkflow = {
  "3": {
    class_type: "KSampler",
    inputs: {
      seed: 156680208700286,
      steps: 20,
      cfg: 8,
      sampler_name: "euler",
      scheduler: "normal",
      denoise: 1,
      model: ["4", 0],
      positive: ["7", 0],
      negative: ["6", 0],
      latent_image: ["5", 0],
    },
  },
  "4": { class_type: "CheckpointLoaderSimple", inputs: { ckpt_name: "v1-5.safetensors" } },
  "5": { class_type: "EmptyLatentImage", inputs: { width: 512, height: 512, batch_size: 1 } },
  // The negative prompt comes first in id order; the positive one must still be text1.
  "6": {
    class_type: "CLIPTextEncode",
    inputs: { text: "blurry, watermark", clip: ["4", 1] },
    _meta: { title: "Negative" },
  },
  "7": { class_type: "CLIPTextEncode", inputs: { text: "a lighthouse", clip: ["4", 1] } },
  "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["4", 2] } },
  "9": { class_type: "SaveImage", inputs: { filename_prefix: "ComfyUI", images: ["8", 0] } },
  "10": { class_type: "PreviewImage", inputs: { images: ["8", 0] } },
};

describe("parseComfyWorkflow", () => {
  it("recognises the API format, and a whole /prompt body", () => {
    const text = JSON.stringify(DEFAULT, null, 2);
    expect(parseComfyWorkflow(`  ${text}\n`)).toEqual({ workflow: DEFAULT });
    expect(parseComfyWorkflow(JSON.stringify({ prompt: DEFAULT, client_id: "x" }))).toEqual({
      workflow: DEFAULT,
    });
  });

  it("explains that the UI format must be exported as API", () => {
    const ui = { last_node_id: 9, nodes: [{ id: 3, type: "KSampler" }], links: [] };
    const parsed = parseComfyWorkflow(JSON.stringify(ui));
    expect(parsed).toEqual({ error: expect.stringContaining("Export (API)") });
  });

  it("ignores what is not a ComfyUI workflow", () => {
    expect(parseComfyWorkflow("hello")).toBeNull();
    expect(parseComfyWorkflow("{not json")).toBeNull();
    expect(parseComfyWorkflow("{}")).toBeNull();
    expect(parseComfyWorkflow("[1, 2]")).toBeNull();
    expect(parseComfyWorkflow(JSON.stringify({ nodes: [], edges: [] }))).toBeNull();
    expect(parseComfyWorkflow(JSON.stringify({ "1": { class_type: "X" } }))).toBeNull();
  });
});

describe("proposeBindings", () => {
  it("binds the prompts (positive first), the seed as a number, and the first SaveImage", () => {
    const proposal = proposeBindings(DEFAULT);
    expect(proposal.bindings).toEqual([
      { source: "text1", node: "7", input: "text", type: "text" },
      { source: "text2", node: "6", input: "text", type: "text" },
      { source: "text3", node: "3", input: "seed", type: "number" },
    ]);
    expect(proposal.output).toEqual({ node: "9", index: 0 });
    expect(proposal.notes).toEqual([
      "text1 → the prompt of node 7 (CLIPTextEncode).",
      "text2 → the text of node 6 (Negative).",
      "text3 → the seed of node 3 (KSampler), as a number.",
      "Output: the first image of node 9 (SaveImage).",
    ]);
  });

  it("binds LoadImage images, and a PreviewImage when there is no SaveImage", () => {
    const workflow: ComfyWorkflow = {
      "1": { class_type: "LoadImage", inputs: { image: "photo.png" } },
      "2": { class_type: "ImageInvert", inputs: { image: ["1", 0] } },
      "3": { class_type: "PreviewImage", inputs: { images: ["2", 0] } },
    };
    const proposal = proposeBindings(workflow);
    expect(proposal.bindings).toEqual([
      { source: "image1", node: "1", input: "image", type: "image" },
    ]);
    expect(proposal.output).toEqual({ node: "3", index: 0 });
  });

  it("leaves a linked text alone and says what it could not bind", () => {
    const workflow: ComfyWorkflow = {};
    for (let i = 1; i <= 6; i++) {
      workflow[String(i)] = { class_type: "CLIPTextEncode", inputs: { text: `t${i}` } };
    }
    workflow["7"] = { class_type: "CLIPTextEncode", inputs: { text: ["1", 0] } };
    for (let i = 8; i <= 11; i++) {
      workflow[String(i)] = { class_type: "LoadImage", inputs: { image: `i${i}.png` } };
    }
    const proposal = proposeBindings(workflow);
    expect(proposal.bindings.map((b) => b.source)).toEqual([
      "text1",
      "text2",
      "text3",
      "text4",
      "image1",
      "image2",
      "image3",
    ]);
    expect(proposal.bindings.some((b) => b.node === "7")).toBe(false);
    expect(proposal.notes.filter((n) => n.startsWith("Not bound"))).toHaveLength(3);
    expect(proposal.output).toBeNull();
    expect(proposal.notes.at(-1)).toBe(
      "No SaveImage or PreviewImage node: choose the output node.",
    );
  });

  it("orders node ids as ComfyUI numbers them", () => {
    const save = { class_type: "SaveImage", inputs: {} };
    expect(nodeOrder({ "10": save, "9": save, "2": save })).toEqual(["2", "9", "10"]);
  });

  it("makes the params of the node (the credential is picked after)", () => {
    const params = importedParams(proposeBindings(DEFAULT));
    expect(Object.keys(params)).toEqual(["workflow", "bindings", "output"]);
    expect(params.workflow).toBe(DEFAULT);
  });
});
