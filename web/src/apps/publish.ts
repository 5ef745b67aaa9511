// The "Publish as app" form without React: what a workflow's graph can show (its input nodes
// as fields, its nodes as outputs), the form's state made from a graph or from a published
// app, and the request body it becomes (with the mistakes the server would refuse, found
// first and pointed at).
import type { components } from "../api/schema";

type Schemas = components["schemas"];
export type AppRecord = Schemas["AppOut"];
export type AppCreateBody = Schemas["AppCreate"];
export type AppUpdateBody = Schemas["AppUpdate"];
export type Access = AppRecord["access"];
export type FieldKind = "text" | "image" | "audio" | "video";

/** The few fields of a canvas node or a saved graph's node that the form reads. */
export interface GraphNodeLike {
  id: string;
  type?: string;
  data?: Record<string, unknown>;
}
export interface GraphEdgeLike {
  source: string;
  target: string;
}

const INPUT_KIND: Record<string, FieldKind> = {
  TextInput: "text",
  ImageInput: "image",
  AudioInput: "audio",
  VideoInput: "video",
};
/** Canvas furniture: never a node whose result a visitor could see. */
const NOT_OUTPUTS = new Set(["Note", "Group"]);
export const DEFAULT_MAX_LENGTH = 2000;
/** The hardest proof of work the server takes (each bit doubles a visitor's work). */
export const MAX_CHALLENGE_BITS = 24;

export interface FieldDraft {
  key: string;
  kind: FieldKind;
  shown: boolean;
  label: string;
  help: string;
  /** Prefilled text (text fields only). */
  default: string;
  maxLength: string;
  required: boolean;
}
export interface OutputDraft {
  nodeId: string;
  /** What the node is, for the owner choosing (its label or type). */
  title: string;
  shown: boolean;
  label: string;
}
export type PasswordChoice = "keep" | "set" | "none";
export interface AppDraft {
  title: string;
  description: string;
  coverAssetId: string;
  fields: FieldDraft[];
  outputs: OutputDraft[];
  access: Access;
  password: PasswordChoice;
  passwordValue: string;
  budgetDaily: string;
  budgetTotal: string;
  maxConcurrent: string;
  ratePerVisitor: string;
  ratePerIp: string;
  /** Embedding origins, one a line. */
  frameAncestors: string;
  /** The proof of work each run must carry, in leading zero bits; empty: none. */
  challengeBits: string;
}

/** The run-input keys the graph's input nodes read, with their kind (the server's rule: a
 * TextInput without a key reads ``text``), each once, in the graph's order. */
export function inputCandidates(nodes: GraphNodeLike[]): { key: string; kind: FieldKind }[] {
  const found = new Map<string, FieldKind>();
  for (const node of nodes) {
    const kind = node.type ? INPUT_KIND[node.type] : undefined;
    if (!kind) continue;
    const raw = node.data?.key;
    const key = typeof raw === "string" && raw ? raw : kind === "text" ? "text" : "";
    if (key && !found.has(key)) found.set(key, kind);
  }
  return [...found].map(([key, kind]) => ({ key, kind }));
}

/** Every node a visitor could be shown, ends of the graph (no edge leaving) first. */
export function outputCandidates(
  nodes: GraphNodeLike[],
  edges: GraphEdgeLike[],
): { nodeId: string; title: string; end: boolean }[] {
  const sources = new Set(edges.map((e) => e.source));
  const listed = nodes
    .filter((n) => !NOT_OUTPUTS.has(n.type ?? "") && !(n.type && n.type in INPUT_KIND))
    .map((n) => {
      const label = typeof n.data?.label === "string" && n.data.label ? n.data.label : "";
      return {
        nodeId: n.id,
        title: label ? `${label} (${n.type ?? "node"})` : `${n.id} (${n.type ?? "node"})`,
        end: !sources.has(n.id),
      };
    });
  return [...listed.filter((o) => o.end), ...listed.filter((o) => !o.end)];
}

function newField(key: string, kind: FieldKind): FieldDraft {
  return {
    key,
    kind,
    shown: true,
    label: key,
    help: "",
    default: "",
    maxLength: String(DEFAULT_MAX_LENGTH),
    required: true,
  };
}

/** A new app's form: every input shown, the graph's ends shown, link access, the server's
 * default limits. */
export function newDraft(title: string, nodes: GraphNodeLike[], edges: GraphEdgeLike[]): AppDraft {
  return {
    title,
    description: "",
    coverAssetId: "",
    fields: inputCandidates(nodes).map((c) => newField(c.key, c.kind)),
    outputs: outputCandidates(nodes, edges).map((o) => ({
      nodeId: o.nodeId,
      title: o.title,
      shown: o.end,
      label: "",
    })),
    access: "link",
    password: "none",
    passwordValue: "",
    budgetDaily: "",
    budgetTotal: "",
    maxConcurrent: "",
    ratePerVisitor: "20",
    ratePerIp: "60",
    frameAncestors: "",
    challengeBits: "",
  };
}

const text = (value: number | null | undefined) => (value == null ? "" : String(value));

/** The form of a published app, over the graph it would be published with: the app's fields
 * and outputs as it shows them, then the graph's others, not shown. */
export function draftFromApp(
  app: AppRecord,
  nodes: GraphNodeLike[],
  edges: GraphEdgeLike[],
): AppDraft {
  const fields: FieldDraft[] = app.inputs.map((f) => ({
    key: f.key,
    kind: f.kind,
    shown: true,
    label: f.label ?? f.key,
    help: f.help ?? "",
    default: f.default ?? "",
    maxLength: String(f.max_length ?? DEFAULT_MAX_LENGTH),
    required: f.required ?? true,
  }));
  for (const c of inputCandidates(nodes)) {
    if (!fields.some((f) => f.key === c.key))
      fields.push({ ...newField(c.key, c.kind), shown: false });
  }
  const candidates = outputCandidates(nodes, edges);
  const outputs: OutputDraft[] = app.outputs.map((o) => ({
    nodeId: o.node_id,
    title: candidates.find((c) => c.nodeId === o.node_id)?.title ?? o.node_id,
    shown: true,
    label: o.label === o.node_id ? "" : (o.label ?? ""),
  }));
  for (const c of candidates) {
    if (!outputs.some((o) => o.nodeId === c.nodeId))
      outputs.push({ nodeId: c.nodeId, title: c.title, shown: false, label: "" });
  }
  return {
    title: app.title,
    description: app.description,
    coverAssetId: app.cover_asset_id ?? "",
    fields,
    outputs,
    access: app.access,
    password: app.has_password ? "keep" : "none",
    passwordValue: "",
    budgetDaily: text(app.budget_daily),
    budgetTotal: text(app.budget_total),
    maxConcurrent: text(app.max_concurrent),
    ratePerVisitor: String(app.rate_per_visitor),
    ratePerIp: String(app.rate_per_ip),
    frameAncestors: app.frame_ancestors.join("\n"),
    challengeBits: text(app.challenge_bits),
  };
}

/** A problem with the form, by the form's own name for the control. */
export interface DraftProblem {
  field: string;
  message: string;
}

type Common = Omit<AppCreateBody, "workflow_id" | "workflow_version" | "password" | "published">;

/** The fields a create and an update both send, or the problems that stop it. */
export function draftBody(draft: AppDraft): {
  body: Common & { password?: string | null };
  problems: DraftProblem[];
} {
  const problems: DraftProblem[] = [];
  const whole = (name: string, value: string, min: number, optional: boolean): number | null => {
    const trimmed = value.trim();
    if (trimmed === "") {
      if (!optional) problems.push({ field: name, message: "needs a number" });
      return null;
    }
    const n = Number(trimmed);
    if (!Number.isInteger(n) || n < min || n > 2_000_000_000)
      problems.push({ field: name, message: `a whole number, at least ${min}` });
    return Number.isInteger(n) ? n : null;
  };
  if (!draft.title.trim()) problems.push({ field: "title", message: "the app needs a title" });
  const inputs = draft.fields
    .filter((f) => f.shown)
    .map((f) => {
      const longest = whole(`max_length:${f.key}`, f.maxLength, 1, true) ?? DEFAULT_MAX_LENGTH;
      if (f.kind === "text" && f.default.length > longest)
        problems.push({ field: `default:${f.key}`, message: `longer than ${longest} characters` });
      return {
        key: f.key,
        label: f.label.trim() || f.key,
        help: f.help.trim(),
        default: f.kind === "text" && f.default !== "" ? f.default : null,
        max_length: longest,
        required: f.required,
      };
    });
  const outputs = draft.outputs
    .filter((o) => o.shown)
    .map((o) => ({ node_id: o.nodeId, label: o.label.trim() || o.nodeId }));
  if (outputs.length === 0)
    problems.push({ field: "outputs", message: "show at least one output" });
  const origins = draft.frameAncestors
    .split(/[\n,]+/)
    .map((o) => o.trim().replace(/\/+$/, ""))
    .filter(Boolean);
  for (const origin of origins) {
    if (!/^https?:\/\/[^/?#;,'"\\*\s]+$/.test(origin))
      problems.push({ field: "frame_ancestors", message: `${origin} is not scheme://host[:port]` });
  }
  const body: Common & { password?: string | null } = {
    title: draft.title.trim(),
    description: draft.description.trim(),
    cover_asset_id: draft.coverAssetId || null,
    inputs,
    outputs,
    access: draft.access,
    budget_daily: whole("budget_daily", draft.budgetDaily, 0, true),
    budget_total: whole("budget_total", draft.budgetTotal, 0, true),
    max_concurrent: whole("max_concurrent", draft.maxConcurrent, 1, true),
    rate_per_visitor: whole("rate_per_visitor", draft.ratePerVisitor, 1, false) ?? 20,
    rate_per_ip: whole("rate_per_ip", draft.ratePerIp, 1, false) ?? 60,
    frame_ancestors: origins,
    challenge_bits: whole("challenge_bits", draft.challengeBits, 1, true),
  };
  if ((body.challenge_bits ?? 0) > MAX_CHALLENGE_BITS)
    problems.push({ field: "challenge_bits", message: `at most ${MAX_CHALLENGE_BITS}` });
  if (draft.password === "set") {
    if (draft.passwordValue.length < 4 || draft.passwordValue.length > 128)
      problems.push({ field: "password", message: "4 to 128 characters" });
    body.password = draft.passwordValue;
  } else if (draft.password === "none") {
    body.password = null;
  }
  return { body, problems };
}

/** The body of ``POST /apps``: the draft, published, on the saved version ``version``. */
export function createBody(
  draft: AppDraft,
  workflowId: string,
  version: number,
): { body: AppCreateBody; problems: DraftProblem[] } {
  const { body, problems } = draftBody(draft);
  const { password, ...rest } = body;
  return {
    body: {
      ...rest,
      workflow_id: workflowId,
      workflow_version: version,
      published: true,
      ...(password ? { password } : {}),
    },
    problems,
  };
}

/** The body of ``PATCH /apps/{id}``: every field of the form (the password only when it is
 * set or removed), and ``workflow_version`` when the app moves to another version. */
export function updateBody(
  draft: AppDraft,
  version?: number,
): { body: AppUpdateBody; problems: DraftProblem[] } {
  const { body, problems } = draftBody(draft);
  return {
    body: { ...body, ...(version !== undefined ? { workflow_version: version } : {}) },
    problems,
  };
}

/** The snippet that shows the app in another site's page. */
export function embedSnippet(app: Pick<AppRecord, "url" | "title">): string {
  const title = app.title.replace(/&/g, "&amp;").replace(/"/g, "&quot;").replace(/</g, "&lt;");
  return `<iframe src="${app.url}" width="480" height="900" style="border:0" title="${title}"></iframe>`;
}
