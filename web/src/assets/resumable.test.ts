import { describe, expect, it } from "vitest";
import { isNewAsset, isResumable, problemOf, RESUMABLE_ABOVE } from "./resumable";

function failed(status: number, body: string): Error {
  const error = new Error("tus: unexpected response") as Error & { originalResponse: unknown };
  error.originalResponse = { getStatus: () => status, getBody: () => body };
  return error;
}

describe("isResumable", () => {
  it("sends files over 8 MiB through tus, smaller ones in one request", () => {
    expect(isResumable({ size: RESUMABLE_ABOVE })).toBe(false);
    expect(isResumable({ size: RESUMABLE_ABOVE + 1 })).toBe(true);
    expect(isResumable({ size: 0 })).toBe(false);
  });
});

describe("problemOf", () => {
  it("keeps the server's problem from the failed request", () => {
    const body = JSON.stringify({
      title: "Payload too large",
      status: 413,
      detail: "The file is larger than 50 MiB.",
      code: "payload_too_large",
    });
    const error = problemOf(failed(413, body)) as Error & { status: number };
    expect(error.status).toBe(413);
    expect(error.message).toBe("The file is larger than 50 MiB.");
  });

  it("says the network failed when no answer came", () => {
    expect(problemOf(new Error("tus: failed to upload chunk")).message).toBe(
      "The upload was interrupted (network error).",
    );
  });
});

describe("isNewAsset", () => {
  const created = Date.parse("2026-11-29T04:00:07.000Z");

  it("is new when the server made it after the upload was created", () => {
    expect(isNewAsset({ created_at: "2026-11-29T04:00:09.125Z" }, created)).toBe(true);
    // The Date header has whole seconds: an asset of the same second is this upload's.
    expect(isNewAsset({ created_at: "2026-11-29T04:00:07.400Z" }, created + 999)).toBe(true);
  });

  it("is the account's earlier asset when made before the upload", () => {
    expect(isNewAsset({ created_at: "2026-11-28T10:00:00.000Z" }, created)).toBe(false);
  });

  it("is new for an upload resumed from another tab (no creation time here)", () => {
    expect(isNewAsset({ created_at: "2026-11-28T10:00:00.000Z" }, null)).toBe(true);
  });
});
