import { describe, expect, it } from "vitest";
import { cardPath, nextPage } from "./gallery";

describe("nextPage", () => {
  it("keeps the path and query of the next link", () => {
    expect(
      nextPage('<http://127.0.0.1:8000/api/v1/public/apps?limit=24&cursor=abc>; rel="next"'),
    ).toBe("/api/v1/public/apps?limit=24&cursor=abc");
  });
  it("is null on the last page or for another relation", () => {
    expect(nextPage(null)).toBeNull();
    expect(nextPage("")).toBeNull();
    expect(nextPage('<http://x/api/v1/public/apps?cursor=a>; rel="prev"')).toBeNull();
  });
  it("finds next among several links", () => {
    expect(nextPage('<http://x/a?cursor=1>; rel="prev", <http://x/b?cursor=2>; rel="next"')).toBe(
      "/b?cursor=2",
    );
  });
});

describe("cardPath", () => {
  it("is the app's page on this origin", () => {
    expect(cardPath({ slug: "abc_D-1" })).toBe("/apps/abc_D-1");
  });
});
