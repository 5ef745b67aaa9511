import { describe, expect, it } from "vitest";
import {
  boundsProblem,
  displayValue,
  formFields,
  orderFields,
  parseInput,
  type JsonSchema,
} from "./schema";

// Shapes exactly as the server's catalog publishes them (Pydantic's JSON Schema).
const tts: JsonSchema = {
  properties: {
    voice: { default: "en", maxLength: 32, minLength: 2, title: "Voice", type: "string" },
    speed: { default: 1.0, maximum: 2.0, minimum: 0.5, title: "Speed", type: "number" },
    engine: {
      default: "auto",
      enum: ["auto", "local", "provider"],
      title: "Engine",
      type: "string",
    },
  },
  title: "TextToSpeechParams",
  type: "object",
};
const textInput: JsonSchema = {
  properties: {
    key: { anyOf: [{ type: "string" }, { type: "null" }], default: null, title: "Key" },
    text: { default: "", title: "Text", type: "string" },
  },
  type: "object",
};
const withRefs: JsonSchema = {
  $defs: { Mode: { enum: ["a", "b"], title: "Mode", type: "string" } },
  properties: {
    mode: { $ref: "#/$defs/Mode", default: "b" },
    width: { default: 1024, maximum: 16384, minimum: 1, title: "Width", type: "integer" },
    loud: { default: true, title: "Loud", type: "boolean" },
    headers: { additionalProperties: { type: "string" }, title: "Headers", type: "object" },
  },
  required: ["width"],
  type: "object",
};

describe("formFields", () => {
  it("maps enums to selects and numbers with their bounds and defaults", () => {
    const [voice, speed, engine] = formFields(tts);
    expect(voice).toMatchObject({ name: "voice", kind: "text", default: "en", maxLength: 32 });
    expect(speed).toMatchObject({ kind: "number", min: 0.5, max: 2, default: 1 });
    expect(engine).toMatchObject({ kind: "select", options: ["auto", "local", "provider"] });
  });

  it("unwraps optional values and long text", () => {
    const [key, text] = formFields(textInput);
    expect(key).toMatchObject({ kind: "text", nullable: true, default: null, label: "Key" });
    expect(text).toMatchObject({ kind: "textarea", nullable: false });
  });

  it("follows $ref into $defs and keeps required", () => {
    const fields = formFields(withRefs);
    expect(fields.map((f) => f.kind)).toEqual(["select", "integer", "boolean", "json"]);
    expect(fields[0]).toMatchObject({ options: ["a", "b"], default: "b" });
    expect(fields[1]).toMatchObject({ required: true, min: 1, max: 16384 });
  });
});

describe("values", () => {
  const [voice, speed] = formFields(tts);
  const [key] = formFields(textInput);
  const fields = formFields(withRefs);

  it("shows the node's value, else the default", () => {
    expect(displayValue(speed!, {})).toBe("1");
    expect(displayValue(speed!, { speed: 1.5 })).toBe("1.5");
    expect(displayValue(key!, {})).toBe("");
    expect(displayValue(fields[2]!, {})).toBe(true);
  });

  it("parses what is typed into the stored type", () => {
    expect(parseInput(speed!, "1.25")).toEqual({ ok: true, value: 1.25 });
    expect(parseInput(fields[1]!, "12.5")).toEqual({ ok: false, error: "Enter a whole number." });
    expect(parseInput(fields[1]!, "")).toEqual({ ok: false, error: "Required." });
    expect(parseInput(speed!, "")).toEqual({ ok: true, remove: true });
    expect(parseInput(key!, "")).toEqual({ ok: true, remove: true });
    expect(parseInput(voice!, "de")).toEqual({ ok: true, value: "de" });
    expect(parseInput(fields[3]!, '{"a": "b"}')).toEqual({ ok: true, value: { a: "b" } });
    expect(parseInput(fields[3]!, "{")).toEqual({ ok: false, error: "Enter valid JSON." });
  });

  it("says when a number is out of bounds", () => {
    expect(boundsProblem(speed!, 3)).toBe("At most 2.");
    expect(boundsProblem(speed!, 0.1)).toBe("At least 0.5.");
    expect(boundsProblem(speed!, 1)).toBeNull();
  });
});

describe("field order", () => {
  it("puts TextInput's text before its key, as the schema does not", () => {
    expect(formFields(textInput).map((f) => f.name)).toEqual(["key", "text"]);
    expect(formFields(textInput, "TextInput").map((f) => f.name)).toEqual(["text", "key"]);
  });

  it("keeps the schema's order for types without an entry", () => {
    expect(formFields(tts, "TextToSpeech").map((f) => f.name)).toEqual([
      "voice",
      "speed",
      "engine",
    ]);
    const fields = formFields(tts);
    expect(orderFields(fields, "Unknown")).toEqual(fields);
  });
});
