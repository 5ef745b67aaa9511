import { describe, expect, it } from "vitest";
import {
  CREDENTIAL_KINDS,
  createFields,
  kindOf,
  maskedSecret,
  rotateFields,
  shownFields,
  takesCredential,
  credentialKinds,
  credentialRequired,
} from "./kinds";

describe("credential kinds", () => {
  it("lists every kind the server stores, each with its secret fields", () => {
    const secrets = Object.fromEntries(
      CREDENTIAL_KINDS.map((k) => [k.kind, k.fields.filter((f) => f.secret).map((f) => f.name)]),
    );
    expect(secrets).toEqual({
      openai: ["api_key"],
      replicate: ["api_token"],
      fal: ["api_key"],
      comfyui: ["bearer_token", "password"],
      elevenlabs: ["api_key"],
      http_bearer: ["token"],
      http_header: ["header_value"],
    });
  });

  it("marks only openai as driving nodes", () => {
    expect(CREDENTIAL_KINDS.filter((k) => k.drivesNodes).map((k) => k.kind)).toEqual([
      "openai",
      "replicate",
      "fal",
      "comfyui",
    ]);
  });

  it("builds a new credential's fields, trimming all but secrets and dropping empty optionals", () => {
    expect(
      createFields("openai", { base_url: " http://x/v1 ", api_key: " sk-a b ", other: "no" }),
    ).toEqual({ base_url: "http://x/v1", api_key: " sk-a b " });
    expect(createFields("comfyui", { base_url: "http://c", username: "", password: "" })).toEqual({
      base_url: "http://c",
    });
    // A required field left empty is still sent: the server names it in its answer.
    expect(createFields("http_header", {})).toEqual({ header_name: "", header_value: "" });
    expect(createFields("nope", { a: "b" })).toEqual({});
  });

  it("rotates only the secret fields typed", () => {
    expect(rotateFields("openai", { base_url: "http://y", api_key: "sk-new" })).toEqual({
      api_key: "sk-new",
    });
    expect(rotateFields("openai", { api_key: "" })).toBeNull();
    expect(rotateFields("comfyui", { password: "p", bearer_token: "" })).toEqual({ password: "p" });
  });

  it("shows only the hint of a secret", () => {
    expect(maskedSecret("sk-…a1b2")).toBe("sk-…a1b2");
    expect(maskedSecret("…")).toBe("…");
    // Anything else is not a hint the server made: never echo it.
    expect(maskedSecret("sk-full-secret-value")).toBe("…");
  });

  it("shows non-secret fields in the kind's order, never a secret one", () => {
    expect(
      shownFields("comfyui", { username: "ann", base_url: "http://c", password: "leak" }),
    ).toEqual([
      { label: "Base URL", value: "http://c" },
      { label: "User name", value: "ann" },
    ]);
    expect(shownFields("openai", { api_key: "leak" })).toEqual([]);
    expect(shownFields("unknown", { base_url: "x" })).toEqual([]);
  });

  it("knows which node params take a credential", () => {
    expect(takesCredential({ properties: { model: {}, credential: {} } })).toBe(true);
    expect(takesCredential({ properties: { text: {} } })).toBe(false);
    expect(takesCredential(null)).toBe(false);
    const hosted = {
      properties: { credential: { "x-credential-kinds": ["replicate", "fal"] } },
      required: ["credential", "model"],
    };
    expect(credentialKinds(hosted)).toEqual(["replicate", "fal"]);
    expect(credentialRequired(hosted)).toBe(true);
    expect(credentialKinds({ properties: { credential: {} } })).toEqual(["openai"]);
    expect(credentialRequired({ properties: { credential: {} } })).toBe(false);
    expect(kindOf("openai")?.fields.map((f) => f.name)).toEqual(["base_url", "api_key"]);
  });
});
