import { describe, expect, it } from "vitest";
import { recentRuns, remember, runBody, slugOf, usable, type FormField } from "./visitor";

function memory(): Storage {
  const items = new Map<string, string>();
  return {
    get length() {
      return items.size;
    },
    clear: () => items.clear(),
    getItem: (k) => items.get(k) ?? null,
    key: (i) => [...items.keys()][i] ?? null,
    removeItem: (k) => void items.delete(k),
    setItem: (k, v) => void items.set(k, v),
  };
}

const text: FormField = {
  key: "name",
  kind: "text",
  label: "Name",
  help: "",
  default: null,
  max_length: 40,
  required: true,
};

describe("the app page", () => {
  it("reads the slug from the path only when it is one", () => {
    expect(slugOf("/apps/abc_DEF-1")).toBe("abc_DEF-1");
    expect(slugOf("/apps/abc/")).toBe("abc");
    expect(slugOf("/apps/")).toBeNull();
    expect(slugOf("/apps/a/b")).toBeNull();
  });

  it("keeps the newest runs first, each once", () => {
    const storage = memory();
    remember(storage, "s", { run_id: "1", token: "t1", created_at: "a" });
    remember(storage, "s", { run_id: "2", token: "t2", created_at: "b" });
    remember(storage, "s", { run_id: "1", token: "t1", created_at: "a" });
    expect(recentRuns(storage, "s").map((r) => r.run_id)).toEqual(["1", "2"]);
    expect(recentRuns(storage, "other")).toEqual([]);
    storage.setItem("nodeloom.app.bad", "{nope");
    expect(recentRuns(storage, "bad")).toEqual([]);
  });

  it("sends JSON without files and multipart with them", () => {
    const image: FormField = { ...text, key: "photo", kind: "image" };
    const plain = runBody([text, image], { name: "Ada", other: "x" }, {});
    expect(plain.json).toBe(true);
    expect(JSON.parse(plain.body as string)).toEqual({ input: { name: "Ada" } });
    const file = new File([new Uint8Array([1, 2])], "a.png", { type: "image/png" });
    const multi = runBody([text, image], { name: "Ada" }, { photo: file });
    expect(multi.json).toBe(false);
    const form = multi.body as FormData;
    expect(form.get("input")).toBe(JSON.stringify({ name: "Ada" }));
    expect((form.get("photo") as File).name).toBe("a.png");
  });
});

describe("usable", () => {
  it("takes a challenge with more than a minute left", () => {
    const now = Date.parse("2026-11-28T04:00:00.000Z");
    expect(usable({ expires_at: "2026-11-28T04:10:00.000Z" }, now)).toBe(true);
    expect(usable({ expires_at: "2026-11-28T04:00:59.000Z" }, now)).toBe(false);
    expect(usable({ expires_at: "2026-11-28T03:59:00.000Z" }, now)).toBe(false);
  });
});
