import { describe, expect, it } from "vitest";
import { parseScheduleInput } from "./scheduleDraft";

describe("parseScheduleInput", () => {
  it("is null when empty", () => {
    expect(parseScheduleInput("  ")).toBeNull();
  });
  it("parses a JSON object", () => {
    expect(parseScheduleInput('{"text": "today"}')).toEqual({ text: "today" });
  });
  it("refuses what is not a JSON object", () => {
    expect(parseScheduleInput("[1]")).toMatch(/JSON object/);
    expect(parseScheduleInput("nope")).toMatch(/not valid JSON/);
  });
});
