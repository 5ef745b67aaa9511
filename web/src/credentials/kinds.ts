// The credential kinds the server stores and the fields of each, as the add form shows them.
// The server declares them (one Pydantic model per kind) but does not publish them as data, so
// this table mirrors docs/providers.md; a kind or field the server does not know is refused
// there with a pointer (400 invalid_request), which the form shows. Pure, so unit-tested.

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
}

const field = (
  name: string,
  label: string,
  secret: boolean,
  extra: Partial<KindField> = {},
): KindField => ({ name, label, secret, optional: false, ...extra });

const BASE_URL = field("base_url", "Base URL", false, {
  placeholder: "https://api.openai.com/v1",
});

export const CREDENTIAL_KINDS: readonly CredentialKind[] = [
  {
    kind: "openai",
    label: "OpenAI-compatible (OpenAI, Ollama, vLLM, LocalAI…)",
    fields: [BASE_URL, field("api_key", "API key", true)],
    drivesNodes: true,
  },
  {
    kind: "replicate",
    label: "Replicate",
    fields: [field("api_token", "API token", true)],
    drivesNodes: true,
  },
  { kind: "fal", label: "fal.ai", fields: [field("api_key", "API key", true)], drivesNodes: true },
  {
    kind: "comfyui",
    label: "ComfyUI",
    fields: [
      { ...BASE_URL, placeholder: "https://comfy.example.com" },
      field("bearer_token", "Bearer token", true, { optional: true }),
      field("username", "User name", false, { optional: true }),
      field("password", "Password", true, { optional: true }),
    ],
    drivesNodes: true,
  },
  {
    kind: "elevenlabs",
    label: "ElevenLabs",
    fields: [field("api_key", "API key", true)],
    drivesNodes: false,
  },
  {
    kind: "http_bearer",
    label: "HTTP bearer token",
    fields: [field("token", "Token", true)],
    drivesNodes: false,
  },
  {
    kind: "http_header",
    label: "HTTP header",
    fields: [
      field("header_name", "Header name", false, { placeholder: "X-Api-Key" }),
      field("header_value", "Header value", true),
    ],
    drivesNodes: false,
  },
];

/** The kind a provider node's `credential` param takes. */
export const NODE_CREDENTIAL_KIND = "openai";

export function kindOf(kind: string): CredentialKind | undefined {
  return CREDENTIAL_KINDS.find((k) => k.kind === kind);
}

/** The body's `fields` for a new credential: every field typed, trimmed where it is not a
 * secret (a secret is sent exactly as typed), empty optional ones left out. */
export function createFields(kind: string, values: Record<string, string>): Record<string, string> {
  const out: Record<string, string> = {};
  for (const f of kindOf(kind)?.fields ?? []) {
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
  kind: string,
  values: Record<string, string>,
): Record<string, string> | null {
  const out: Record<string, string> = {};
  for (const f of kindOf(kind)?.fields ?? []) {
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
  kind: string,
  fields: Record<string, unknown>,
): { label: string; value: string }[] {
  const spec = kindOf(kind);
  if (!spec) return [];
  return spec.fields
    .filter((f) => !f.secret && typeof fields[f.name] === "string")
    .map((f) => ({ label: f.label, value: String(fields[f.name]) }));
}

/** Whether a node type's params take a credential (LLMText, TextToImage, TextToSpeech). */
export function takesCredential(paramsSchema: unknown): boolean {
  const props = (paramsSchema as { properties?: Record<string, unknown> } | null)?.properties;
  return !!props && "credential" in props;
}

interface CredentialParams {
  properties?: Record<string, { "x-credential-kinds"?: unknown } | undefined>;
  required?: unknown;
}

/** The credential kinds a node's `credential` param takes: the server lists them in the
 * param's schema (`x-credential-kinds`); a param without the list takes an openai one. */
export function credentialKinds(paramsSchema: unknown): string[] {
  const listed = (paramsSchema as CredentialParams | null)?.properties?.credential?.[
    "x-credential-kinds"
  ];
  return Array.isArray(listed) && listed.every((k) => typeof k === "string")
    ? (listed as string[])
    : [NODE_CREDENTIAL_KIND];
}

/** Whether the node cannot run without a credential (no operator default to fall back on). */
export function credentialRequired(paramsSchema: unknown): boolean {
  const required = (paramsSchema as CredentialParams | null)?.required;
  return Array.isArray(required) && required.includes("credential");
}
