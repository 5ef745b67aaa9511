import { describe, expect, it } from "vitest";
import type { FlowNode } from "../graph/convert";
import {
  formatBytes,
  keyForFile,
  mediaFields,
  mediaKindOfNode,
  quotaPercent,
  runInput,
} from "./media";

function node(id: string, type: string, data: Record<string, unknown> = {}): FlowNode {
  return { id, type, position: { x: 0, y: 0 }, data };
}

describe("keyForFile", () => {
  it("makes a JSON- and form-safe key from the file's name", () => {
    expect(keyForFile("My Cat (1).JPG", [])).toBe("my_cat_1");
    expect(keyForFile("voice-memo.m4a", [])).toBe("voice_memo");
    expect(keyForFile(".hidden", [])).toBe("media");
    expect(keyForFile("日本.png", [])).toBe("media");
  });

  it("never takes a key the graph already reads", () => {
    const nodes = [
      node("a", "ImageInput", { key: "cat" }),
      node("b", "TextInput", { key: "cat_2" }),
    ];
    expect(keyForFile("cat.png", nodes)).toBe("cat_3");
    expect(keyForFile("dog.png", nodes)).toBe("dog");
  });
});

describe("mediaFields", () => {
  it("lists one field per key of a media input node, with its kind and default", () => {
    const nodes = [
      node("t", "TextInput", { key: "caption" }),
      node("p", "ImageInput", { key: "photo", asset: "a1" }),
      node("q", "ImageInput", { key: "photo", asset: "a2" }),
      node("v", "VideoInput", { key: "clip" }),
      node("d", "AudioInput", { asset: "a3" }),
    ];
    expect(mediaFields(nodes)).toEqual([
      { key: "photo", kind: "image", initial: "a1" },
      { key: "clip", kind: "video", initial: "" },
    ]);
  });

  it("names the kind of each input node type", () => {
    expect(mediaKindOfNode("AudioInput")).toBe("audio");
    expect(mediaKindOfNode("TextInput")).toBeNull();
    expect(mediaKindOfNode(undefined)).toBeNull();
  });
});

describe("runInput", () => {
  it("sends every text field and only the media keys that name an asset", () => {
    expect(
      runInput({ caption: "hi" }, ["caption"], { photo: "a1", clip: "" }, ["photo", "clip"]),
    ).toEqual({ caption: "hi", photo: "a1" });
  });

  it("is null when there is nothing to send", () => {
    expect(runInput({}, [], { clip: "" }, ["clip"])).toBeNull();
    expect(runInput({}, [], {}, [])).toBeNull();
  });

  it("keeps an empty text field, as the dialog always did", () => {
    expect(runInput({}, ["text"], {}, [])).toEqual({ text: "" });
  });
});

describe("sizes", () => {
  it("reads bytes as people do", () => {
    expect(formatBytes(1023)).toBe("1023 B");
    expect(formatBytes(1536)).toBe("1.5 KB");
    expect(formatBytes(12 * 1024 * 1024)).toBe("12.0 MB");
    expect(formatBytes(1024 ** 3)).toBe("1.00 GB");
  });

  it("shows the share of the quota, capped at 100", () => {
    expect(quotaPercent(512, 1024)).toBe(50);
    expect(quotaPercent(2048, 1024)).toBe(100);
    expect(quotaPercent(0, 0)).toBe(100);
  });
});
