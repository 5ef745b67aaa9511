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

// Wan 2.1 text to video, its frames saved by VideoHelperSuite's Video Combine (abridged).
const VIDEO: ComfyWorkflow = {
  "3": {
    class_type: "KSampler",
    inputs: { seed: 82628696717253, positive: ["6", 0], negative: ["7", 0], model: ["37", 0] },
  },
  "6": { class_type: "CLIPTextEncode", inputs: { text: "a fox in snow", clip: ["38", 0] } },
  "7": { class_type: "CLIPTextEncode", inputs: { text: "static, blurry", clip: ["38", 0] } },
  "8": { class_type: "VAEDecode", inputs: { samples: ["3", 0], vae: ["39", 0] } },
  "37": { class_type: "UNETLoader", inputs: { unet_name: "wan2.1_t2v_1.3B_fp16.safetensors" } },
  "50": {
    class_type: "VHS_VideoCombine",
    inputs: { frame_rate: 16, format: "video/h264-mp4", images: ["8", 0] },
    _meta: { title: "Video Combine 🎥🅥🅗🅢" },
  },
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
      "No output node (SaveImage, SaveVideo, VHS_VideoCombine, SaveAudio...): choose the output node.",
    );
    expect(proposal.nodeType).toBe("ComfyUIWorkflow");
  });

  it("keeps an image with ComfyUIWorkflow", () => {
    const proposal = proposeBindings(DEFAULT);
    expect(proposal.nodeType).toBe("ComfyUIWorkflow");
    expect(proposal.kind).toBe("image");
  });

  it("proposes a video output (VideoHelperSuite) over a preview image, for the video node", () => {
    const workflow: ComfyWorkflow = {
      ...VIDEO,
      "51": { class_type: "PreviewImage", inputs: { images: ["8", 0] } },
    };
    const proposal = proposeBindings(workflow);
    expect(proposal.nodeType).toBe("ComfyUIWorkflowVideo");
    expect(proposal.kind).toBe("video");
    expect(proposal.output).toEqual({ node: "50", index: 0 });
    expect(proposal.bindings[0]).toEqual({
      source: "text1",
      node: "6",
      input: "text",
      type: "text",
    });
    expect(proposal.notes).toContain(
      "Output: the video (kept as MP4) of node 50 (Video Combine 🎥🅥🅗🅢).",
    );
    expect(proposal.notes.at(-1)).toBe(
      "Also an output: 51 (PreviewImage), image (another ComfyUI node of that kind can keep it).",
    );
  });

  it("proposes core SaveVideo and the animated saves as video", () => {
    for (const type of ["SaveVideo", "SaveWEBM", "SaveAnimatedWEBP", "SaveAnimatedPNG"]) {
      const workflow: ComfyWorkflow = {
        "1": { class_type: "LoadImage", inputs: { image: "a.png" } },
        "2": { class_type: type, inputs: { filename_prefix: "x", images: ["1", 0] } },
      };
      const proposal = proposeBindings(workflow);
      expect([proposal.nodeType, proposal.output]).toEqual([
        "ComfyUIWorkflowVideo",
        { node: "2", index: 0 },
      ]);
    }
  });

  it("proposes a saved sound for the audio node", () => {
    const workflow: ComfyWorkflow = {
      "6": {
        class_type: "CLIPTextEncode",
        inputs: { text: "rain on a tin roof", clip: ["10", 0] },
      },
      "10": { class_type: "CLIPLoader", inputs: { clip_name: "t5_base.safetensors" } },
      "11": { class_type: "EmptyLatentAudio", inputs: { seconds: 10, batch_size: 1 } },
      "12": { class_type: "VAEDecodeAudio", inputs: { samples: ["11", 0], vae: ["10", 0] } },
      "19": { class_type: "SaveAudioMP3", inputs: { filename_prefix: "a", audio: ["12", 0] } },
    };
    const proposal = proposeBindings(workflow);
    expect(proposal.nodeType).toBe("ComfyUIWorkflowAudio");
    expect(proposal.output).toEqual({ node: "19", index: 0 });
    expect(proposal.notes.at(-1)).toBe(
      "Output: the sound (kept as MP3) of node 19 (SaveAudioMP3).",
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
