// The params form of a node, derived from its JSON Schema (as Pydantic writes it): one field
// per property, with its default, enums as selects, numbers with their bounds. Pure, so the
// rules are unit-tested; SchemaForm.tsx renders the fields.

export type JsonSchema = {
  type?: string | string[];
  title?: string;
  description?: string;
  default?: unknown;
  enum?: unknown[];
  minimum?: number;
  maximum?: number;
  exclusiveMinimum?: number;
  exclusiveMaximum?: number;
  minLength?: number;
  maxLength?: number;
  properties?: Record<string, JsonSchema>;
  required?: string[];
  anyOf?: JsonSchema[];
  oneOf?: JsonSchema[];
  allOf?: JsonSchema[];
  $ref?: string;
  $defs?: Record<string, JsonSchema>;
  [key: string]: unknown;
};

export type FieldKind = "text" | "textarea" | "integer" | "number" | "boolean" | "select" | "json";

export interface FormField {
  name: string;
  label: string;
  description: string;
  kind: FieldKind;
  required: boolean;
  nullable: boolean;
  default: unknown;
  options: string[];
  min?: number;
  max?: number;
  maxLength?: number;
}

const LONG_TEXT = new Set(["text", "template", "prompt", "system", "body"]);

function resolve(schema: JsonSchema, root: JsonSchema): JsonSchema {
  let current = schema;
  for (let depth = 0; current.$ref && depth < 8; depth++) {
    const name = current.$ref.replace(/^#\/\$defs\//, "");
    const target = root.$defs?.[name];
    if (!target) break;
    const { $ref: _ref, ...rest } = current;
    void _ref;
    current = { ...target, ...rest };
  }
  if (current.allOf?.length === 1 && current.allOf[0]) {
    const { allOf, ...rest } = current;
    current = { ...resolve(allOf[0] as JsonSchema, root), ...rest };
  }
  return current;
}

/** Per node type, the fields that come first, in this order; the rest follow in the schema's
 * order. The server's schema orders params as its models declare them, which is not always
 * the order a person fills them in (TextInput declares `key` before `text`). */
export const FIELD_ORDER: Readonly<Record<string, readonly string[]>> = {
  TextInput: ["text", "key"],
  // A model's input form is read with the credential, for the model: those come first.
  ...Object.fromEntries(
    ["", "Video", "Audio", "Text"].map((s) => [
      `ReplicateModel${s}`,
      ["credential", "model", "input", "bindings"],
    ]),
  ),
};

/** The fields of `type`'s form, its main fields first. */
export function orderFields(fields: FormField[], type: string | undefined): FormField[] {
  const first = FIELD_ORDER[type ?? ""] ?? [];
  const rank = (f: FormField) => {
    const i = first.indexOf(f.name);
    return i === -1 ? first.length : i;
  };
  // Array.prototype.sort is stable: fields not in the table keep the schema's order.
  return [...fields].sort((a, b) => rank(a) - rank(b));
}

export function formFields(schema: JsonSchema, type?: string): FormField[] {
  return orderFields(schemaFields(schema), type);
}

function schemaFields(schema: JsonSchema): FormField[] {
  const required = new Set(schema.required ?? []);
  return Object.entries(schema.properties ?? {}).map(([name, raw]) => {
    let prop = resolve(raw, schema);
    let nullable = false;
    const variants = prop.anyOf ?? prop.oneOf;
    if (variants) {
      const concrete = variants.filter((v) => v.type !== "null");
      nullable = concrete.length < variants.length;
      if (concrete.length === 1 && concrete[0]) {
        const { anyOf: _a, oneOf: _o, ...rest } = prop;
        void _a;
        void _o;
        prop = { ...resolve(concrete[0], schema), ...rest };
      }
    }
    const type = Array.isArray(prop.type) ? prop.type.find((t) => t !== "null") : prop.type;
    let kind: FieldKind;
    if (prop.enum) kind = "select";
    else if (type === "integer") kind = "integer";
    else if (type === "number") kind = "number";
    else if (type === "boolean") kind = "boolean";
    else if (type === "string")
      kind = LONG_TEXT.has(name) || (prop.maxLength ?? 0) > 500 ? "textarea" : "text";
    else kind = "json";
    const field: FormField = {
      name,
      label: prop.title ?? name,
      description: prop.description ?? "",
      kind,
      required: required.has(name),
      nullable,
      default: prop.default,
      options: (prop.enum ?? []).map(String),
    };
    const min = prop.minimum ?? prop.exclusiveMinimum;
    const max = prop.maximum ?? prop.exclusiveMaximum;
    if (min !== undefined) field.min = min;
    if (max !== undefined) field.max = max;
    if (prop.maxLength !== undefined) field.maxLength = prop.maxLength;
    return field;
  });
}

/** What the control shows: the node's value, else the schema default. */
export function displayValue(field: FormField, data: Record<string, unknown>): string | boolean {
  const value = field.name in data ? data[field.name] : field.default;
  if (field.kind === "boolean") return Boolean(value);
  if (value === null || value === undefined) return "";
  if (field.kind === "json") return JSON.stringify(value, null, 2);
  return String(value);
}

export type Parsed =
  { ok: true; value: unknown } | { ok: true; remove: true } | { ok: false; error: string };

/** The value to store for what the user typed; an emptied optional field goes back to its
 * default (the key is removed, as a graph made by hand would have it). */
export function parseInput(field: FormField, raw: string | boolean): Parsed {
  if (field.kind === "boolean") return { ok: true, value: Boolean(raw) };
  const text = String(raw);
  if (text === "" && field.kind !== "text" && field.kind !== "textarea") {
    return field.required ? { ok: false, error: "Required." } : { ok: true, remove: true };
  }
  if (text === "" && field.nullable) return { ok: true, remove: true };
  switch (field.kind) {
    case "integer":
    case "number": {
      const value = Number(text);
      if (!Number.isFinite(value)) return { ok: false, error: "Enter a number." };
      if (field.kind === "integer" && !Number.isInteger(value)) {
        return { ok: false, error: "Enter a whole number." };
      }
      return { ok: true, value };
    }
    case "json":
      try {
        return { ok: true, value: JSON.parse(text) as unknown };
      } catch {
        return { ok: false, error: "Enter valid JSON." };
      }
    default:
      return { ok: true, value: text };
  }
}

/** Bounds the browser cannot enforce by itself, said in words. */
export function boundsProblem(field: FormField, value: unknown): string | null {
  if (typeof value !== "number") return null;
  if (field.min !== undefined && value < field.min) return `At least ${field.min}.`;
  if (field.max !== undefined && value > field.max) return `At most ${field.max}.`;
  return null;
}
