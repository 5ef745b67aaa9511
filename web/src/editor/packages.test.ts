import { describe, expect, it } from "vitest";
import type { NodeType } from "../api/types";
import {
  ALL_PACKAGES,
  BUILT_IN,
  filterByPackage,
  packageBadge,
  packageChoices,
  paletteNote,
  unavailableReason,
} from "./packages";

function t(type: string, pkg: [string, string, string] | null, reason: string | null = null) {
  return {
    type,
    category: "image",
    title: type,
    description: "",
    available: reason === null,
    status: reason === null ? "available" : "unavailable",
    unavailable_reason: reason,
    package: pkg ? { name: pkg[0], version: pkg[1], namespace: pkg[2] } : null,
    cost: { credits: 1, per_second: 0 },
    inputs: [],
    output: { kind: "image" },
    params_schema: {},
    version: 1,
  } as unknown as NodeType;
}

const WATERMARK: [string, string, string] = ["nodeloom-watermark", "0.1.0", "watermark"];
const QR: [string, string, string] = ["nodeloom-qrcode", "1.2.0", "qrcode"];
const CATALOG = [
  t("ImageResize", null),
  t("watermark.Watermark", WATERMARK),
  t("qrcode.QRCode", QR, "needs SDK >=2,<3; this server has 1.0.0"),
  t("watermark.Stamp", WATERMARK),
  t("TextInput", null),
];

describe("node packages in the palette", () => {
  it("badges a packaged type with its namespace and version, not a built-in one", () => {
    expect(packageBadge(CATALOG[1] as NodeType)).toBe("watermark 0.1.0");
    expect(packageBadge(CATALOG[0] as NodeType)).toBeNull();
  });

  it("offers All, Built-in, then each package once, by name", () => {
    expect(packageChoices(CATALOG)).toEqual([
      { value: ALL_PACKAGES, label: "All" },
      { value: BUILT_IN, label: "Built-in" },
      { value: "nodeloom-qrcode", label: "nodeloom-qrcode 1.2.0" },
      { value: "nodeloom-watermark", label: "nodeloom-watermark 0.1.0" },
    ]);
    expect(packageChoices([t("TextInput", null)]).map((c) => c.label)).toEqual(["All", "Built-in"]);
  });

  it("filters by package, built-in or all", () => {
    const types = (choice: string) => filterByPackage(CATALOG, choice).map((x) => x.type);
    expect(types(ALL_PACKAGES)).toEqual(CATALOG.map((x) => x.type));
    expect(types(BUILT_IN)).toEqual(["ImageResize", "TextInput"]);
    expect(types("nodeloom-watermark")).toEqual(["watermark.Watermark", "watermark.Stamp"]);
    expect(types("nodeloom-gone")).toEqual([]);
  });

  it("says why an unavailable type cannot be added", () => {
    expect(unavailableReason(CATALOG[2] as NodeType)).toBe(
      "needs SDK >=2,<3; this server has 1.0.0",
    );
    expect(unavailableReason(CATALOG[1] as NodeType)).toBeNull();
    const noReason = { ...(CATALOG[0] as NodeType), available: false, unavailable_reason: null };
    expect(unavailableReason(noReason)).toBe("unavailable on this server");
  });

  it("keeps a provider node addable without the operator's provider, saying so", () => {
    const blocked = paletteNote(CATALOG[2] as NodeType);
    expect(blocked).toEqual({ text: "needs SDK >=2,<3; this server has 1.0.0", blocked: true });
    const llm = {
      ...t("LLMText", null, "no AI provider is configured"),
      params_schema: { properties: { prompt: {}, credential: {} } },
    } as unknown as NodeType;
    expect(paletteNote(llm)).toEqual({
      text: "No default provider here: pick one of your credentials.",
      blocked: false,
    });
    expect(paletteNote(CATALOG[0] as NodeType)).toBeNull();
  });
});
