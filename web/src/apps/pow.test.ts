import { describe, expect, it } from "vitest";
import { search, sha256, solve, toHex, zeroBits } from "./pow";

const bytes = (text: string) => new TextEncoder().encode(text);

describe("sha256", () => {
  it("matches the standard's test vectors", () => {
    expect(toHex(sha256(bytes("")))).toBe(
      "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    );
    expect(toHex(sha256(bytes("abc")))).toBe(
      "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad",
    );
    // Two blocks: the length no longer fits beside the message.
    expect(toHex(sha256(bytes("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq")))).toBe(
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1",
    );
    expect(toHex(sha256(bytes("é".repeat(100))))).toBe(
      "f42ec48e1e4b487e590e0b3d4e58437c8327efa855d769709f4942a4f73a7eb6",
    );
  });
});

describe("zeroBits", () => {
  it("counts leading zero bits across words", () => {
    expect(zeroBits(new Uint32Array([0x80000000, 0]))).toBe(0);
    expect(zeroBits(new Uint32Array([0x0000ffff, 0]))).toBe(16);
    expect(zeroBits(new Uint32Array([0, 1]))).toBe(63);
    expect(zeroBits(new Uint32Array([0, 0]))).toBe(64);
  });
});

describe("solving a challenge", () => {
  it("finds the first counter whose hash has the bits asked", () => {
    const found = search("tok", 8, 0, 100_000);
    expect(found).not.toBeNull();
    expect(zeroBits(sha256(bytes(`tok:${found}`)))).toBeGreaterThanOrEqual(8);
    for (let i = 0; i < Number(found); i++)
      expect(zeroBits(sha256(bytes(`tok:${i}`)))).toBeLessThan(8);
  });

  it("gives the event loop back while it searches", async () => {
    const seen: number[] = [];
    let ticks = 0;
    const timer = setInterval(() => ticks++, 0);
    // The first solution of "token 0" at 14 bits is counter 12606 (Python's hashlib agrees):
    // several slices, with timers run between them.
    const solution = await solve("token 0", 14, (tried) => seen.push(tried));
    clearInterval(timer);
    expect(solution).toBe("12606");
    expect(seen.length).toBeGreaterThanOrEqual(6);
    expect(ticks).toBeGreaterThan(0);
  });

  it("stops when aborted", async () => {
    const stop = new AbortController();
    stop.abort();
    await expect(solve("t", 30, undefined, stop.signal)).rejects.toThrow("aborted");
  });
});
