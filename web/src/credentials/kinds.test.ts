import { describe, expect, it } from "vitest";
import type { CredentialKindInfo } from "../api/types";
import {
  createFields,
  fromServer,
  kindOf,
  maskedSecret,
  nodeCredentialKinds,
  rotateFields,
  shownFields,
  takesCredential,
  credentialRequired,
} from "./kinds";

const field = (name: string, title: string, secret: boolean, extra = {}) => ({
  name,
  title,
  secret,
  required: true,
  default: null,
  placeholder: null,
  description: null,
  ...extra,
});

// As GET /api/v1/credential-kinds answers (a part of it).
const SERVER: CredentialKindInfo[] = [
  {
    kind: "openai",
    title: "OpenAI-compatible",
    fields: [
      field("base_url", "Base URL", false, { placeholder: "https://api.openai.com/v1" }),
      field("api_key", "API key", true),
    ],
    testable: true,
    node_types: ["LLMText", "TextToSpeech"],
  },
  {
    kind: "comfyui",
    title: "ComfyUI",
    fields: [
      field("base_url", "Base URL", false),
      field("bearer_token", "Bearer token", true, { required: false }),
      field("username", "User name", false, { required: false }),
      field("password", "Password", true, { required: false }),
    ],
    testable: false,
    node_types: [],
  },
  {
    kind: "elevenlabs",
    title: "ElevenLabs",
    fields: [
      field("base_url", "Base URL", false, {
        required: false,
        default: "https://api.elevenlabs.io",
      }),
      field("api_key", "API key", true),
    ],
    testable: true,
    node_types: ["TextToSpeech"],
  },
  {
    kind: "http_header",
    title: "HTTP header",
    fields: [field("header_name", "Header name", false), field("header_value", "Value", true)],
    testable: false,
    node_types: [],
  },
];
const KINDS = fromServer(SERVER);
const of = (kind: string) => kindOf(KINDS, kind);

describe("credential kinds", () => {
  it("takes every kind from the server, each with its secret fields", () => {
    const secrets = Object.fromEntries(
      KINDS.map((k) => [k.kind, k.fields.filter((f) => f.secret).map((f) => f.name)]),
    );
    expect(secrets).toEqual({
      openai: ["api_key"],
      comfyui: ["bearer_token", "password"],
      elevenlabs: ["api_key"],
      http_header: ["header_value"],
    });
    expect(KINDS.filter((k) => k.drivesNodes).map((k) => k.kind)).toEqual(["openai", "elevenlabs"]);
    // A default is shown as the placeholder, and makes the field optional.
    expect(of("elevenlabs")?.fields[0]).toEqual({
      name: "base_url",
      label: "Base URL",
      secret: false,
      optional: true,
      placeholder: "https://api.elevenlabs.io",
    });
  });

  it("builds a new credential's fields, trimming all but secrets and dropping empty optionals", () => {
    expect(
      createFields(of("openai"), { base_url: " http://x/v1 ", api_key: " sk-a b ", other: "no" }),
    ).toEqual({ base_url: "http://x/v1", api_key: " sk-a b " });
    expect(
      createFields(of("comfyui"), { base_url: "http://c", username: "", password: "" }),
    ).toEqual({ base_url: "http://c" });
    expect(createFields(of("elevenlabs"), { api_key: "xi" })).toEqual({ api_key: "xi" });
    // A required field left empty is still sent: the server names it in its answer.
    expect(createFields(of("http_header"), {})).toEqual({ header_name: "", header_value: "" });
    expect(createFields(of("nope"), { a: "b" })).toEqual({});
  });

  it("rotates only the secret fields typed", () => {
    expect(rotateFields(of("openai"), { base_url: "http://y", api_key: "sk-new" })).toEqual({
      api_key: "sk-new",
    });
    expect(rotateFields(of("openai"), { api_key: "" })).toBeNull();
    expect(rotateFields(of("comfyui"), { password: "p", bearer_token: "" })).toEqual({
      password: "p",
    });
  });

  it("shows only the hint of a secret", () => {
    expect(maskedSecret("sk-…a1b2")).toBe("sk-…a1b2");
    expect(maskedSecret("…")).toBe("…");
    // Anything else is not a hint the server made: never echo it.
    expect(maskedSecret("sk-full-secret-value")).toBe("…");
  });

  it("shows non-secret fields in the kind's order, never a secret one", () => {
    expect(
      shownFields(of("comfyui"), { username: "ann", base_url: "http://c", password: "leak" }),
    ).toEqual([
      { label: "Base URL", value: "http://c" },
      { label: "User name", value: "ann" },
    ]);
    expect(shownFields(of("openai"), { api_key: "leak" })).toEqual([]);
    expect(shownFields(of("unknown"), { base_url: "x" })).toEqual([]);
  });

  it("knows which node params take a credential, and of which kinds", () => {
    expect(takesCredential({ properties: { model: {}, credential: {} } })).toBe(true);
    expect(takesCredential({ properties: { text: {} } })).toBe(false);
    expect(takesCredential(null)).toBe(false);
    expect(nodeCredentialKinds({ credential_kinds: ["openai", "elevenlabs"] })).toEqual([
      "openai",
      "elevenlabs",
    ]);
    expect(
      nodeCredentialKinds({
        credential_kinds: [],
        params_schema: { properties: { credential: { "x-credential-kinds": ["fal"] } } },
      }),
    ).toEqual(["fal"]);
    expect(nodeCredentialKinds({ params_schema: { properties: { credential: {} } } })).toEqual([
      "openai",
    ]);
    const hosted = {
      properties: { credential: { "x-credential-kinds": ["replicate", "fal"] } },
      required: ["credential", "model"],
    };
    expect(credentialRequired(hosted)).toBe(true);
    expect(credentialRequired({ properties: { credential: {} } })).toBe(false);
  });
});
