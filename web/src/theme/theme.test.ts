import { describe, expect, it } from "vitest";
import { THEME_KEY, resolveTheme, storedTheme } from "./theme";

const storage = (value: string | null) => ({
  getItem: (key: string) => (key === THEME_KEY ? value : null),
});

describe("theme", () => {
  it("follows the system unless a theme was chosen", () => {
    expect(resolveTheme("system", true)).toBe("dark");
    expect(resolveTheme("system", false)).toBe("light");
    expect(resolveTheme("light", true)).toBe("light");
    expect(resolveTheme("dark", false)).toBe("dark");
  });

  it("reads the kept choice, and only a known one", () => {
    expect(storedTheme(storage("dark"))).toBe("dark");
    expect(storedTheme(storage("light"))).toBe("light");
    expect(storedTheme(storage("purple"))).toBe("system");
    expect(storedTheme(storage(null))).toBe("system");
    expect(storedTheme(null)).toBe("system");
    const refusing = {
      getItem: () => {
        throw new Error("SecurityError");
      },
    };
    expect(storedTheme(refusing)).toBe("system");
  });
});
