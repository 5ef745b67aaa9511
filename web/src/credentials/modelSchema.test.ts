import { describe, expect, it } from "vitest";
import { formFields, type JsonSchema } from "../forms/schema";
import {
  boundFields,
  extraFields,
  inputData,
  modelInputSchema,
  schemaLookup,
  withField,
} from "./modelSchema";

// As GET /api/v1/credentials/{id}/model-schema answers for black-forest-labs/flux-schnell:
// Replicate's Input schema, its enum components already resolved by the server, properties
// in the order Cog wrote them (not the order to show them: that is `x-order`).
const flux: JsonSchema = {
  type: "object",
  title: "Input",
  required: ["prompt"],
  properties: {
    seed: { type: "integer", title: "Seed", "x-order": 3, description: "Random seed" },
    prompt: { type: "string", title: "Prompt", "x-order": 0, description: "Prompt" },
    go_fast: { type: "boolean", title: "Go Fast", default: true, "x-order": 4 },
    num_outputs: {
      type: "integer",
      title: "Num Outputs",
      default: 1,
      minimum: 1,
      maximum: 4,
      "x-order": 2,
    },
    aspect_ratio: {
      enum: ["1:1", "16:9", "9:16"],
      type: "string",
      title: "aspect_ratio",
      default: "1:1",
      "x-order": 1,
    },
    image: { type: "string", format: "uri", title: "Image", "x-order": 5 },
    extra: { type: "string", title: "Extra" },
  },
};

const VERSION = "5c7d5dc6dd8bf75c1acaa8565735e7986bc5b66206b55cca93cb72c9bf15ccaa";

describe("schemaLookup", () => {
  it("asks for a Replicate model node with a credential and a model", () => {
    const data = { credential: "c1", model: " black-forest-labs/flux-schnell " };
    expect(schemaLookup("ReplicateModel", data)).toEqual({
      credential: "c1",
      model: "black-forest-labs/flux-schnell",
    });
    expect(schemaLookup("ReplicateModel", { credential: "c1", model: `a/b:${VERSION}` })).toEqual({
      credential: "c1",
      model: `a/b:${VERSION}`,
    });
  });

  it("does not ask without a credential, a readable model, or for another node type", () => {
    expect(schemaLookup("ReplicateModel", { model: "a/b" })).toBeNull();
    expect(schemaLookup("ReplicateModel", { credential: "", model: "a/b" })).toBeNull();
    expect(schemaLookup("ReplicateModel", { credential: "c1", model: "black-forest" })).toBeNull();
    expect(schemaLookup("ReplicateModel", { credential: "c1", model: VERSION })).toBeNull();
    expect(schemaLookup("ReplicateModel", { credential: "c1", model: "a/b:short" })).toBeNull();
    expect(schemaLookup("ReplicateModelVideo", { credential: "c1", model: "a/b" })).toEqual({
      credential: "c1",
      model: "a/b",
    });
    expect(schemaLookup("FalModel", { credential: "c1", model: "fal-ai" })).toBeNull();
    expect(schemaLookup("FalModel", { credential: "c1", model: "a/b/c/d/e/f" })).toBeNull();
    expect(schemaLookup("FalModel", { model: "fal-ai/flux/dev" })).toBeNull();
    expect(schemaLookup(undefined, { credential: "c1", model: "a/b" })).toBeNull();
  });
});

describe("schemaLookup for fal", () => {
  it("asks for a fal model node with a credential and an endpoint id", () => {
    const data = { credential: "c2", model: " fal-ai/flux/dev " };
    expect(schemaLookup("FalModel", data)).toEqual({ credential: "c2", model: "fal-ai/flux/dev" });
    expect(
      schemaLookup("FalModelVideo", { credential: "c2", model: "fal-ai/kling-video/v2/pro/i2v" }),
    ).toEqual({
      credential: "c2",
      model: "fal-ai/kling-video/v2/pro/i2v",
    });
    // A Replicate version pin is no fal endpoint id, and a fal path no Replicate model.
    expect(schemaLookup("FalModel", { credential: "c2", model: `a/b:${VERSION}` })).toBeNull();
    expect(
      schemaLookup("ReplicateModel", { credential: "c1", model: "fal-ai/flux/dev" }),
    ).toBeNull();
  });
});

describe("modelInputSchema", () => {
  it("orders the fields by x-order, those without one last", () => {
    const fields = formFields(modelInputSchema(flux));
    expect(fields.map((f) => f.name)).toEqual([
      "prompt",
      "aspect_ratio",
      "num_outputs",
      "seed",
      "go_fast",
      "image",
      "extra",
    ]);
  });

  it("makes the form SchemaForm draws: enums as selects, bounds, required, defaults", () => {
    const fields = formFields(modelInputSchema(flux));
    const by = Object.fromEntries(fields.map((f) => [f.name, f]));
    expect(by.prompt).toMatchObject({ kind: "textarea", required: true, label: "Prompt" });
    expect(by.aspect_ratio).toMatchObject({ kind: "select", options: ["1:1", "16:9", "9:16"] });
    expect(by.num_outputs).toMatchObject({ kind: "integer", min: 1, max: 4, default: 1 });
    expect(by.go_fast).toMatchObject({ kind: "boolean", default: true, required: false });
    expect(by.image).toMatchObject({ kind: "text" });
  });

  it("leaves out the fields bound to the node's inputs", () => {
    const schema = modelInputSchema(flux, { prompt: "text", image: "image" });
    expect(Object.keys(schema.properties ?? {})).toEqual([
      "aspect_ratio",
      "num_outputs",
      "seed",
      "go_fast",
      "extra",
    ]);
    expect(schema.required).toEqual([]);
  });

  it("copes with a schema without properties", () => {
    expect(modelInputSchema({ type: "object" })).toEqual({
      type: "object",
      properties: {},
      required: [],
    });
  });
});

describe("the input object", () => {
  it("sets and removes one field, keeping the others", () => {
    const input = { prompt: "a fox", seed: 3 };
    expect(withField(input, "num_outputs", 2, false)).toEqual({
      prompt: "a fox",
      seed: 3,
      num_outputs: 2,
    });
    expect(withField(input, "seed", undefined, true)).toEqual({ prompt: "a fox" });
    expect(input).toEqual({ prompt: "a fox", seed: 3 }); // not changed in place
    expect(withField(undefined, "seed", 1, false)).toEqual({ seed: 1 });
    expect(withField([1], "seed", 1, false)).toEqual({ seed: 1 });
  });

  it("reads a missing or malformed input as empty", () => {
    expect(inputData(undefined)).toEqual({});
    expect(inputData("x")).toEqual({});
    expect(inputData({ a: 1 })).toEqual({ a: 1 });
  });

  it("says which fields are bound", () => {
    expect(boundFields({ prompt: "text", image: "image" })).toEqual([
      "prompt ← text input",
      "image ← image input",
    ]);
    expect(boundFields(null)).toEqual([]);
  });
});

describe("extraFields", () => {
  it("lists what the input holds beyond the model's fields", () => {
    expect(extraFields({ prompt: "x", steps: 4, seed: 1 }, flux)).toEqual(["steps"]);
    expect(extraFields(undefined, flux)).toEqual([]);
  });
});
