import { describe, expect, it } from "vitest";
import { shortRunId } from "./runName";

describe("shortRunId", () => {
  it("tells apart runs made in the same minute", () => {
    const run = "01a21e21-5f3c-7d10-8a4b-2c9e4f6a1b3d";
    const retry = "01a21e21-9b07-7e22-b1c5-77d0a3e9c842";
    expect(shortRunId(run)).toBe("4f6a1b3d");
    expect(shortRunId(retry)).toBe("a3e9c842");
    expect(shortRunId(run)).not.toBe(shortRunId(retry));
  });
});
