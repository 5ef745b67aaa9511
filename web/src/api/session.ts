// Where the browser keeps its credential: the JWT from POST /auth/login, in sessionStorage
// (this tab only; gone when the tab closes). Never an API key. See docs/webapp.md.
const KEY = "nodeloom.session";

interface Stored {
  token: string;
  expiresAt: number;
}

type Listener = () => void;
const listeners = new Set<Listener>();

export function getToken(): string | null {
  const raw = sessionStorage.getItem(KEY);
  if (!raw) return null;
  try {
    const stored = JSON.parse(raw) as Stored;
    if (stored.expiresAt <= Date.now()) {
      sessionStorage.removeItem(KEY);
      return null;
    }
    return stored.token;
  } catch {
    sessionStorage.removeItem(KEY);
    return null;
  }
}

export function setToken(token: string, expiresInSeconds: number): void {
  const stored: Stored = { token, expiresAt: Date.now() + expiresInSeconds * 1000 };
  sessionStorage.setItem(KEY, JSON.stringify(stored));
  listeners.forEach((fn) => fn());
}

export function clearToken(): void {
  sessionStorage.removeItem(KEY);
  listeners.forEach((fn) => fn());
}

export function onSessionChange(fn: Listener): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
