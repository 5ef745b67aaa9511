// Importing a ComfyUI workflow, as pure functions: recognise what ComfyUI's "Export (API)"
// saves (node id -> {class_type, inputs}) in pasted text, and propose the bindings of a
// ComfyUIWorkflow node: prompt texts of CLIPTextEncode nodes -> text inputs (the positive
// prompt first), LoadImage images -> image inputs, a KSampler seed -> a number, and the
// output: a video node (VHS_VideoCombine, SaveVideo...) first, else a sound node (SaveAudio...),
// else SaveImage (else PreviewImage). The output's kind picks the node type:
// ComfyUIWorkflowVideo, ComfyUIWorkflowAudio or ComfyUIWorkflow. The user edits the proposal.

export const COMFY_NODE_TYPE = "ComfyUIWorkflow";
export type OutputKind = "image" | "video" | "audio";
/** The node type that keeps each kind of output (one output kind per node type). */
export const COMFY_NODE_TYPES: Record<OutputKind, string> = {
  image: COMFY_NODE_TYPE,
  video: "ComfyUIWorkflowVideo",
  audio: "ComfyUIWorkflowAudio",
};
export const TEXT_SLOTS = ["text1", "text2", "text3", "text4"] as const;
export const IMAGE_SLOTS = ["image1", "image2", "image3"] as const;

export interface ComfyNode {
  class_type: string;
  inputs: Record<string, unknown>;
  _meta?: { title?: string };
}
export type ComfyWorkflow = Record<string, ComfyNode>;

export interface ComfyBinding {
  source: string;
  node: string;
  input: string;
  type: "text" | "number" | "image";
}

export interface ComfyProposal {
  /** The node type to add: the one that keeps the proposed output's kind. */
  nodeType: string;
  kind: OutputKind;
  workflow: ComfyWorkflow;
  bindings: ComfyBinding[];
  output: { node: string; index: number } | null;
  /** One line per binding or output, and what could not be bound, for the user to read. */
  notes: string[];
}

export type Parsed = { workflow: ComfyWorkflow } | { error: string };

/** Whether a value is a link to another node's output: [node id, output index]. */
export function isLink(value: unknown): boolean {
  return (
    Array.isArray(value) &&
    value.length === 2 &&
    typeof value[0] === "string" &&
    typeof value[1] === "number"
  );
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/**
 * The ComfyUI workflow in ``text``: ``{workflow}`` in API format, ``{error}`` for ComfyUI's
 * UI format (which cannot run as it is), null when the text is not a ComfyUI workflow.
 */
export function parseComfyWorkflow(text: string): Parsed | null {
  const trimmed = text.trim();
  if (!trimmed.startsWith("{")) return null;
  let value: unknown;
  try {
    value = JSON.parse(trimmed);
  } catch {
    return null;
  }
  if (!isRecord(value)) return null;
  // A whole /prompt body ({"prompt": {...}, "client_id": ...}) holds the workflow too.
  if (isRecord(value.prompt) && !("class_type" in value.prompt)) value = value.prompt;
  if (!isRecord(value)) return null;
  if (Array.isArray(value.nodes) && Array.isArray(value.links)) {
    return {
      error: "This is ComfyUI's UI format. In ComfyUI, use Workflow → Export (API) and paste that.",
    };
  }
  const entries = Object.entries(value);
  if (!entries.length) return null;
  for (const [, node] of entries) {
    if (!isRecord(node) || typeof node.class_type !== "string" || !isRecord(node.inputs)) {
      return null;
    }
  }
  return { workflow: value as ComfyWorkflow };
}

/** Node ids in ComfyUI's order: numerically when they are numbers. */
export function nodeOrder(workflow: ComfyWorkflow): string[] {
  return Object.keys(workflow).sort((a, b) => {
    const na = Number(a);
    const nb = Number(b);
    if (Number.isFinite(na) && Number.isFinite(nb)) return na - nb;
    return a < b ? -1 : a > b ? 1 : 0;
  });
}

const SAMPLERS = ["KSampler", "KSamplerAdvanced", "SamplerCustom"];
const SEED_INPUTS = ["seed", "noise_seed"];
// Output nodes by kind, in the order they are preferred: a video or a sound is what a
// workflow that makes one is for (its PreviewImage is a by-product).
const OUTPUTS: [OutputKind, string[]][] = [
  ["video", ["VHS_VideoCombine", "SaveVideo", "SaveWEBM", "SaveAnimatedWEBP", "SaveAnimatedPNG"]],
  ["audio", ["SaveAudio", "SaveAudioMP3", "SaveAudioOpus", "PreviewAudio"]],
  ["image", ["SaveImage", "PreviewImage"]],
];
const KEPT_AS: Record<OutputKind, string> = {
  image: "the first image",
  video: "the video (kept as MP4)",
  audio: "the sound (kept as MP3)",
};

/** The nodes in ComfyUI's order, with their ids. */
function ordered(workflow: ComfyWorkflow): [string, ComfyNode][] {
  return nodeOrder(workflow).flatMap((id): [string, ComfyNode][] => {
    const node = workflow[id];
    return node ? [[id, node]] : [];
  });
}

function title(id: string, node: ComfyNode): string {
  return `${id} (${node._meta?.title || node.class_type})`;
}

/** The bindings and output proposed for ``workflow`` (see the module comment). */
export function proposeBindings(workflow: ComfyWorkflow): ComfyProposal {
  const nodes = ordered(workflow);
  const bindings: ComfyBinding[] = [];
  const notes: string[] = [];
  const texts: string[] = [...TEXT_SLOTS];
  const images: string[] = [...IMAGE_SLOTS];

  // Prompt texts: those a sampler takes as its positive prompt first, then the others.
  const positive = new Set<string>();
  for (const [, node] of nodes) {
    const link = node.inputs.positive;
    if (SAMPLERS.includes(node.class_type) && isLink(link)) {
      positive.add((link as [string, number])[0]);
    }
  }
  const encoders = nodes.filter(
    ([, node]) =>
      node.class_type.startsWith("CLIPTextEncode") && typeof node.inputs.text === "string",
  );
  encoders.sort(([a], [b]) => Number(positive.has(b)) - Number(positive.has(a)));
  for (const [id, node] of encoders) {
    const source = texts.shift();
    if (!source) {
      notes.push(`Not bound (no text input left): the text of node ${title(id, node)}.`);
      continue;
    }
    bindings.push({ source, node: id, input: "text", type: "text" });
    const role = positive.has(id) ? "prompt" : "text";
    notes.push(`${source} → the ${role} of node ${title(id, node)}.`);
  }

  for (const [id, node] of nodes) {
    if (node.class_type !== "LoadImage" || typeof node.inputs.image !== "string") continue;
    const source = images.shift();
    if (!source) {
      notes.push(`Not bound (no image input left): node ${title(id, node)}.`);
      continue;
    }
    bindings.push({ source, node: id, input: "image", type: "image" });
    notes.push(`${source} → the image of node ${title(id, node)} (uploaded).`);
  }

  for (const [id, node] of nodes) {
    if (!SAMPLERS.includes(node.class_type)) continue;
    const input = SEED_INPUTS.find((name) => typeof node.inputs[name] === "number");
    if (!input) continue;
    const source = texts.shift();
    if (!source) {
      notes.push(`Not bound (no text input left): the ${input} of node ${title(id, node)}.`);
      continue;
    }
    bindings.push({ source, node: id, input, type: "number" });
    notes.push(`${source} → the ${input} of node ${title(id, node)}, as a number.`);
  }

  let output: ComfyProposal["output"] = null;
  let kind: OutputKind = "image";
  const others: string[] = [];
  for (const [outputKind, classes] of OUTPUTS) {
    for (const type of classes) {
      for (const found of nodes.filter(([, node]) => node.class_type === type)) {
        if (output) {
          if (outputKind !== kind) others.push(`${title(...found)}, ${outputKind}`);
          continue;
        }
        output = { node: found[0], index: 0 };
        kind = outputKind;
        notes.push(`Output: ${KEPT_AS[kind]} of node ${title(...found)}.`);
      }
    }
  }
  if (others.length) {
    notes.push(
      `Also an output: ${others.join("; ")} (another ComfyUI node of that kind can keep it).`,
    );
  }
  if (!output) {
    notes.push(
      "No output node (SaveImage, SaveVideo, VHS_VideoCombine, SaveAudio...): choose the output node.",
    );
  }
  return { nodeType: COMFY_NODE_TYPES[kind], kind, workflow, bindings, output, notes };
}

/** The params of a ComfyUIWorkflow node importing ``proposal`` (the credential is chosen after). */
export function importedParams(proposal: ComfyProposal): Record<string, unknown> {
  const params: Record<string, unknown> = {
    workflow: proposal.workflow,
    bindings: proposal.bindings,
  };
  if (proposal.output) params.output = proposal.output;
  return params;
}
