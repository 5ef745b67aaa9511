// A hosted model's input object as a form: the server reads the model's published schema
// with the node's credential (GET /api/v1/credentials/{id}/model-schema: Replicate's
// OpenAPI `Input`, or the body of a fal endpoint's OpenAPI document, references resolved)
// and this turns it into the schema SchemaForm draws for the node's `input` param. Pure, so
// unit-tested; ModelInputForm.tsx renders it.
import type { JsonSchema } from "../forms/schema";

/** Node types whose `input` param is a Replicate model's input object. */
export const REPLICATE_NODE_TYPES: ReadonlySet<string> = new Set([
  "ReplicateModel",
  "ReplicateModelVideo",
  "ReplicateModelAudio",
  "ReplicateModelText",
]);

/** Node types whose `input` param is a fal endpoint's input object. */
export const FAL_NODE_TYPES: ReadonlySet<string> = new Set([
  "FalModel",
  "FalModelVideo",
  "FalModelAudio",
  "FalModelText",
]);

/** Node types whose `input` param the editor draws as the model's own form. */
export const MODEL_NODE_TYPES: ReadonlySet<string> = new Set([
  ...REPLICATE_NODE_TYPES,
  ...FAL_NODE_TYPES,
]);

// A Replicate model the schema endpoint can read: owner/name or owner/name:version (a bare
// version id names no model, and Replicate reads a version only under its model).
const MODEL = /^[A-Za-z0-9][\w.-]*\/[A-Za-z0-9][\w.-]*(:[0-9a-f]{64})?$/;
// A fal endpoint id: owner/app and up to three more segments (fal-ai/flux/dev).
const FAL_MODEL = /^[A-Za-z0-9][\w.-]*(\/[A-Za-z0-9][\w.-]*){1,4}$/;

export interface SchemaLookup {
  credential: string;
  model: string;
}

/** What to ask the server for, for a node of `type` with params `data`; null when the node
 * is not a Replicate or fal model node, or has no credential or no readable model yet. */
export function schemaLookup(
  type: string | undefined,
  data: Record<string, unknown>,
): SchemaLookup | null {
  const pattern = REPLICATE_NODE_TYPES.has(type ?? "")
    ? MODEL
    : FAL_NODE_TYPES.has(type ?? "")
      ? FAL_MODEL
      : null;
  if (pattern === null) return null;
  const { credential, model } = data;
  if (typeof credential !== "string" || credential === "") return null;
  if (typeof model !== "string" || !pattern.test(model.trim())) return null;
  return { credential, model: model.trim() };
}

function order(prop: JsonSchema): number {
  const value = prop["x-order"];
  return typeof value === "number" && Number.isFinite(value) ? value : Number.MAX_SAFE_INTEGER;
}

/** The model's input fields, ordered by `x-order` (those without one last, in the schema's
 * order), without the fields bound to the node's inputs (they are set from upstream
 * artifacts at run time, not typed). */
export function modelInputSchema(
  input: JsonSchema,
  bindings: Readonly<Record<string, unknown>> = {},
): JsonSchema {
  const entries = Object.entries(input.properties ?? {})
    .filter(([name]) => !(name in bindings))
    .map(([name, prop], index) => ({ name, prop, index }))
    .sort((a, b) => order(a.prop) - order(b.prop) || a.index - b.index);
  const properties: Record<string, JsonSchema> = {};
  for (const { name, prop } of entries) properties[name] = prop;
  const names = new Set(Object.keys(properties));
  return {
    type: "object",
    properties,
    required: (input.required ?? []).filter((name) => names.has(name)),
  };
}

/** The bound fields, as said under the form: "image ← image input". */
export function boundFields(bindings: unknown): string[] {
  if (bindings === null || typeof bindings !== "object") return [];
  return Object.entries(bindings as Record<string, unknown>).map(
    ([field, source]) => `${field} ← ${String(source)} input`,
  );
}

/** The node's input object after one field of the form changed; `remove` takes the field
 * out (the model's default applies). */
export function withField(
  current: unknown,
  name: string,
  value: unknown,
  remove: boolean,
): Record<string, unknown> {
  const base =
    current !== null && typeof current === "object" && !Array.isArray(current)
      ? { ...(current as Record<string, unknown>) }
      : {};
  if (remove) delete base[name];
  else base[name] = value;
  return base;
}

/** The node's input object as the form reads it. */
export function inputData(current: unknown): Record<string, unknown> {
  return current !== null && typeof current === "object" && !Array.isArray(current)
    ? (current as Record<string, unknown>)
    : {};
}

/** Fields of the node's input object the model's schema does not list (typed as JSON
 * before, or for another model): still sent, so said under the form. */
export function extraFields(current: unknown, schema: JsonSchema): string[] {
  const known = schema.properties ?? {};
  return Object.keys(inputData(current)).filter((name) => !(name in known));
}
