import { afterEach, describe, expect, it, vi } from "vitest";
import { cancelUpload, isCancelled, startUpload, uploadsNow } from "./uploads";

/** The part of XMLHttpRequest an upload uses: it never answers until told. */
class HeldRequest {
  static sent: HeldRequest[] = [];
  upload: { onprogress: ((e: ProgressEvent) => void) | null } = { onprogress: null };
  onload: (() => void) | null = null;
  onerror: (() => void) | null = null;
  onabort: (() => void) | null = null;
  aborted = false;
  open() {}
  setRequestHeader() {}
  send() {
    HeldRequest.sent.push(this);
  }
  abort() {
    this.aborted = true;
    this.onabort?.();
  }
}

describe("cancelling an upload", () => {
  afterEach(() => {
    vi.unstubAllGlobals();
    HeldRequest.sent = [];
  });

  it("aborts its request and leaves the list without an error", async () => {
    vi.stubGlobal("XMLHttpRequest", HeldRequest);
    vi.stubGlobal("sessionStorage", { getItem: () => null, removeItem: () => {} });
    const pending = startUpload(new File([new Uint8Array(1024)], "big.mov"));
    const request = HeldRequest.sent[0];
    expect(request).toBeDefined();
    expect(request?.aborted).toBe(false);
    const listed = uploadsNow();
    expect(listed.map((u) => u.name)).toEqual(["big.mov"]);
    cancelUpload(listed[0]!.id);
    const failure = await pending.then(
      () => null,
      (exc: unknown) => exc,
    );
    expect(request?.aborted).toBe(true);
    expect(isCancelled(failure)).toBe(true);
    expect(uploadsNow()).toEqual([]);
  });

  it("tells a cancellation from a failure", () => {
    expect(isCancelled(new DOMException("Upload cancelled", "AbortError"))).toBe(true);
    expect(isCancelled(new Error("HTTP 413"))).toBe(false);
  });
});
