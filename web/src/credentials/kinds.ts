// The credential kinds the server stores and the fields of each, as the add form shows them.
// The server publishes them (GET /api/v1/credential-kinds, from its one model per kind), so
// nothing here copies its table: `fromServer` turns its answer into what the forms use. Pure,
// so unit-tested.
import type { CredentialKindInfo } from "../api/types";

export interface KindField {
  name: string;
  label: string;
  /** Secret fields are typed into password inputs, stored encrypted and never shown again. */
  secret: boolean;
  optional: boolean;
  placeholder?: string;
}

export interface CredentialKind {
  kind: string;
  label: string;
  fields: readonly KindField[];
  /** Whether a node can use it today (the others are stored only, for now). */
  drivesNodes: boolean;
  /** Whether "Test connection" can try it. */
  testable: boolean;
  /** The node types whose `credential` param takes it. */
  nodeTypes: readonly string[];
}

/** The server's kinds as the forms use them: a field with a default is optional and shows
 * the default as its placeholder (left empty, the server uses it). */
export function fromServer(kinds: readonly CredentialKindInfo[]): CredentialKind[] {
  return kinds.map((k) => ({
    kind: k.kind,
    label: k.title,
    fields: k.fields.map((f) => ({
      name: f.name,
      label: f.title,
      secret: f.secret,
      optional: !f.required,
      placeholder: f.placeholder ?? f.default ?? undefined,
    })),
    drivesNodes: k.node_types.length > 0,
    testable: k.testable,
    nodeTypes: k.node_types,
  }));
}

/** The kind a credential form starts with. */
export const DEFAULT_KIND = "openai";

export function kindOf(kinds: readonly CredentialKind[], kind: string): CredentialKind | undefined {
  return kinds.find((k) => k.kind === kind);
}

/** The body's `fields` for a new credential: every field typed, trimmed where it is not a
 * secret (a secret is sent exactly as typed), empty optional ones left out. */
export function createFields(
  spec: CredentialKind | undefined,
  values: Record<string, string>,
): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of spec?.fields ?? []) {
    const raw = values[f.name] ?? "";
    const value = f.secret ? raw : raw.trim();
    if (value === "" && f.optional) continue;
    out[f.name] = value;
  }
  return out;
}

/** The body's `fields` for a rotation: only the secret fields typed. The server keeps the
 * non-secret ones and replaces all stored secrets by the ones sent. Null when none was typed. */
export function rotateFields(
  spec: CredentialKind | undefined,
  values: Record<string, string>,
): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const f of spec?.fields ?? []) {
    const value = values[f.name] ?? "";
    if (f.secret && value !== "") out[f.name] = value;
  }
  return Object.keys(out).length ? out : null;
}

/** What the list shows of a credential's secret: the server's masked hint, never more. */
export function maskedSecret(hint: string): string {
  return hint.includes("…") ? hint : "…";
}

/** The non-secret fields worth showing beside a credential (base_url, user name...), in the
 * kind's order; anything that looks secret by the kind's table is never shown. */
export function shownFields(
  spec: CredentialKind | undefined,
  fields: Record<string, unknown>,
): { label: string; value: string }[] {
  if (!spec) return [];
  return spec.fields
    .filter((f) => !f.secret && typeof fields[f.name] === "string")
    .map((f) => ({ label: f.label, value: String(fields[f.name]) }));
}

/** Whether a node type's params take a credential (LLMText, TextToImage, TextToSpeech...). */
export function takesCredential(paramsSchema: unknown): boolean {
  const props = (paramsSchema as { properties?: Record<string, unknown> } | null)?.properties;
  return !!props && "credential" in props;
}

/** The credential kinds a node type takes: what the catalog says (`credential_kinds`), or
 * the `x-credential-kinds` of its param's schema, else openai (older servers). */
export function nodeCredentialKinds(type: {
  credential_kinds?: readonly string[] | null;
  params_schema?: unknown;
}): readonly string[] {
  if (type.credential_kinds && type.credential_kinds.length) return type.credential_kinds;
  const props = (type.params_schema as { properties?: Record<string, unknown> } | null)?.properties;
  const declared = (props?.credential as { "x-credential-kinds"?: unknown } | undefined)?.[
    "x-credential-kinds"
  ];
  if (Array.isArray(declared) && declared.every((k) => typeof k === "string")) {
    return declared as string[];
  }
  return [DEFAULT_KIND];
}

interface CredentialParams {
  required?: unknown;
}

/** Whether the node cannot run without a credential (no operator default to fall back on). */
export function credentialRequired(paramsSchema: unknown): boolean {
  const required = (paramsSchema as CredentialParams | null)?.required;
  return Array.isArray(required) && required.includes("credential");
}
