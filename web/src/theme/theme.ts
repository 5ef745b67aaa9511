// Light or dark: the system's setting (prefers-color-scheme) unless the user chose one,
// which is kept in localStorage. The styles key off <html data-theme="light|dark">.
export type ThemeChoice = "system" | "light" | "dark";
export const THEME_KEY = "nodeloom.theme";

/** The choice kept in `storage` ("system" when none, or an unknown value). */
export function storedTheme(storage: Pick<Storage, "getItem"> | null): ThemeChoice {
  const value = readKept(storage);
  return value === "light" || value === "dark" ? value : "system";
}

function readKept(storage: Pick<Storage, "getItem"> | null): string | null {
  try {
    return storage?.getItem(THEME_KEY) ?? null;
  } catch {
    return null; // storage refused (privacy settings): the system's setting
  }
}

/** The theme shown for a choice, given whether the system prefers dark. */
export function resolveTheme(choice: ThemeChoice, prefersDark: boolean): "light" | "dark" {
  if (choice === "system") return prefersDark ? "dark" : "light";
  return choice;
}

function prefersDark(): boolean {
  return window.matchMedia?.("(prefers-color-scheme: dark)").matches ?? false;
}

function safeStorage(): Storage | null {
  try {
    return window.localStorage;
  } catch {
    return null;
  }
}

/** Shows the theme of the stored choice. */
export function applyTheme(choice: ThemeChoice = storedTheme(safeStorage())): void {
  document.documentElement.dataset.theme = resolveTheme(choice, prefersDark());
}

/** Keeps `choice` and shows it ("system" forgets any choice). */
export function chooseTheme(choice: ThemeChoice): void {
  const storage = safeStorage();
  try {
    if (choice === "system") storage?.removeItem(THEME_KEY);
    else storage?.setItem(THEME_KEY, choice);
  } catch {
    // not kept: shown for this page only
  }
  applyTheme(choice);
}

/** Shows the stored theme now, and follows the system's setting while none is chosen. */
export function startTheme(): void {
  applyTheme();
  window.matchMedia?.("(prefers-color-scheme: dark)").addEventListener?.("change", () => {
    if (storedTheme(safeStorage()) === "system") applyTheme("system");
  });
}
