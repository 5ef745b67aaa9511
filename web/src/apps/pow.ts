// The app's proof of work, solved in the page: find a counter such that SHA-256 of
// "<token>:<counter>" starts with `bits` zero bits. SHA-256 is written out here rather than
// taken from crypto.subtle, which exists only on HTTPS pages (a server on a LAN address is
// plain HTTP) and costs a promise per hash. The search runs in slices of a few milliseconds
// and gives the event loop back between them, so the page keeps answering.

const K = new Uint32Array([
  0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
  0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
  0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
  0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
  0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
  0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
  0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
  0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
]);
const W = new Uint32Array(64);

/** SHA-256 of ``bytes``: the eight 32-bit words of the digest, big-endian. */
export function sha256(bytes: Uint8Array): Uint32Array {
  const h = new Uint32Array([
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
  ]);
  const length = bytes.length;
  const blocks = Math.ceil((length + 9) / 64);
  const padded = new Uint8Array(blocks * 64);
  padded.set(bytes);
  padded[length] = 0x80;
  const view = new DataView(padded.buffer);
  view.setUint32(padded.length - 8, Math.floor(length / 0x20000000));
  view.setUint32(padded.length - 4, (length * 8) >>> 0);
  for (let block = 0; block < blocks; block++) {
    for (let i = 0; i < 16; i++) W[i] = view.getUint32(block * 64 + i * 4);
    for (let i = 16; i < 64; i++) {
      const a = W[i - 15] as number;
      const b = W[i - 2] as number;
      const s0 = ((a >>> 7) | (a << 25)) ^ ((a >>> 18) | (a << 14)) ^ (a >>> 3);
      const s1 = ((b >>> 17) | (b << 15)) ^ ((b >>> 19) | (b << 13)) ^ (b >>> 10);
      W[i] = ((W[i - 16] as number) + s0 + (W[i - 7] as number) + s1) | 0;
    }
    let a = h[0] as number;
    let b = h[1] as number;
    let c = h[2] as number;
    let d = h[3] as number;
    let e = h[4] as number;
    let f = h[5] as number;
    let g = h[6] as number;
    let hh = h[7] as number;
    for (let i = 0; i < 64; i++) {
      const s1 = ((e >>> 6) | (e << 26)) ^ ((e >>> 11) | (e << 21)) ^ ((e >>> 25) | (e << 7));
      const ch = (e & f) ^ (~e & g);
      const t1 = (hh + s1 + ch + (K[i] as number) + (W[i] as number)) | 0;
      const s0 = ((a >>> 2) | (a << 30)) ^ ((a >>> 13) | (a << 19)) ^ ((a >>> 22) | (a << 10));
      const maj = (a & b) ^ (a & c) ^ (b & c);
      hh = g;
      g = f;
      f = e;
      e = (d + t1) | 0;
      d = c;
      c = b;
      b = a;
      a = (t1 + s0 + maj) | 0;
    }
    const add = [a, b, c, d, e, f, g, hh];
    for (let i = 0; i < 8; i++) h[i] = (h[i] as number) + (add[i] as number);
  }
  return h;
}

export function toHex(words: Uint32Array): string {
  return [...words].map((w) => w.toString(16).padStart(8, "0")).join("");
}

/** How many leading bits of the digest are zero. */
export function zeroBits(words: Uint32Array): number {
  let bits = 0;
  for (const word of words) {
    if (word === 0) {
      bits += 32;
      continue;
    }
    return bits + Math.clz32(word);
  }
  return bits;
}

const encoder = new TextEncoder();

/** Try counters ``from`` .. ``from + count - 1``; the first that solves it, or null. */
export function search(token: string, bits: number, from: number, count: number): string | null {
  for (let counter = from; counter < from + count; counter++) {
    const candidate = String(counter);
    if (zeroBits(sha256(encoder.encode(`${token}:${candidate}`))) >= bits) return candidate;
  }
  return null;
}

const SLICE = 2000; // hashes between two looks at the event loop: a few milliseconds

/** A solution of the challenge, found without holding the page: the search gives the event
 * loop back after every slice. ``onProgress`` hears how many hashes were tried. */
export async function solve(
  token: string,
  bits: number,
  onProgress?: (tried: number) => void,
  signal?: AbortSignal,
): Promise<string> {
  for (let from = 0; ; from += SLICE) {
    if (signal?.aborted) throw new Error("aborted");
    const found = search(token, bits, from, SLICE);
    if (found !== null) return found;
    onProgress?.(from + SLICE);
    await new Promise((resolve) => setTimeout(resolve, 0));
  }
}
