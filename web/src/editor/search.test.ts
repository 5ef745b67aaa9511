import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import { ALIASES, searchNodeTypes } from "./search";

function t(type: string, category: string, title: string, description = ""): NodeType {
  return {
    type,
    category,
    title,
    description,
    available: true,
    cost: { credits: 1, per_second: 0 },
    inputs: [],
    output: { kind: "text" },
    params_schema: {},
    version: 1,
  } as unknown as NodeType;
}

const CATALOG = [
  t("LLMText", "ai", "LLM text", "Ask the configured language model."),
  t("TextToImage", "ai", "Text to image", "An image from a prompt."),
  t("AudioConcat", "audio", "Concatenate audio"),
  t("TextToSpeech", "audio", "Text to speech", "Read text aloud."),
  t("ImageResize", "image", "Resize image"),
  t("ImageThumbnail", "image", "Thumbnail"),
  t("RenderText", "image", "Render text"),
  t("TextInput", "text", "Text input"),
  t("Delay", "utility", "Delay", "Waits a number of seconds."),
  t("HttpRequest", "utility", "HTTP request"),
  t("ImageAudioToVideo", "video", "Image + audio to video"),
  t("VideoConcat", "video", "Concatenate videos"),
];
const found = (q: string) => searchNodeTypes(CATALOG, q).map((x) => x.type);

describe("searchNodeTypes", () => {
  it.each([
    ["tts", "TextToSpeech"],
    ["speech", "TextToSpeech"],
    ["llm", "LLMText"],
    ["wait", "Delay"],
    ["resize", "ImageResize"],
    ["fetch", "HttpRequest"],
  ])("%s finds %s first", (query, type) => {
    expect(found(query)[0]).toBe(type);
  });

  it("finds a category by its short name", () => {
    expect(found("img")).toEqual(
      expect.arrayContaining(["ImageResize", "ImageThumbnail", "RenderText"]),
    );
    expect(found("img")).not.toContain("TextInput");
    expect(found("video")).toEqual(expect.arrayContaining(["ImageAudioToVideo", "VideoConcat"]));
    expect(found("video")).not.toContain("Delay");
  });

  it("needs every word to match, and returns everything for an empty query", () => {
    expect(found("concat video")).toEqual(["VideoConcat"]);
    expect(found("  ")).toHaveLength(CATALOG.length);
    expect(found("zzzz")).toEqual([]);
  });

  it("puts a title match before a description match", () => {
    expect(found("seconds")).toEqual(["Delay"]);
    expect(found("image").slice(0, 2)).toEqual(["ImageResize", "ImageThumbnail"]);
    expect(found("image")).toContain("TextToImage");
  });

  it("names only real types or categories in its alias table", () => {
    const types = new Set([
      ...CATALOG.map((c) => c.type),
      "image",
      "video",
      "audio",
      "text",
      "AudioTrim",
      "AudioVolume",
      "ImageCaption",
      "ImageCrop",
      "ImageFilter",
      "ImageGrid",
      "ImageRotate",
      "JsonExtract",
      "KenBurns",
      "Slideshow",
      "TextJoin",
      "TextSplit",
      "TextTemplate",
      "ToneGenerator",
      "VideoAddAudio",
      "VideoCaption",
      "VideoSound",
      "WordCount",
      "GradientBackground",
    ]);
    for (const meanings of Object.values(ALIASES)) {
      for (const m of meanings) expect(types).toContain(m);
    }
  });
});
