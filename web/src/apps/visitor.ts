// What the app page knows without React: the API's shapes (from the generated schema), the
// visitor's recent runs kept in localStorage with their tokens, and the requests it makes.
import type { components } from "../api/schema";

export type PublicApp = components["schemas"]["PublicApp"];
export type FormField = components["schemas"]["FormField"];
export type VisitorRun = components["schemas"]["VisitorRun"];
export type Accepted = components["schemas"]["VisitorRunAccepted"];
export type Challenge = components["schemas"]["Challenge"];

export interface Recent {
  run_id: string;
  token: string;
  created_at: string;
}

const KEEP = 10;
const SESSION_KEY = "nodeloom.visitor";

export function slugOf(pathname: string): string | null {
  const match = /^\/apps\/([A-Za-z0-9_-]{1,64})\/?$/.exec(pathname);
  return match?.[1] ?? null;
}

/** The visitor's runs of ``slug``, newest first (the newest ``KEEP``). */
export function recentRuns(storage: Pick<Storage, "getItem">, slug: string): Recent[] {
  try {
    const value: unknown = JSON.parse(storage.getItem(`nodeloom.app.${slug}`) ?? "[]");
    return Array.isArray(value) ? (value as Recent[]).slice(0, KEEP) : [];
  } catch {
    return [];
  }
}

export function remember(storage: Storage, slug: string, run: Recent): Recent[] {
  const runs = [run, ...recentRuns(storage, slug).filter((r) => r.run_id !== run.run_id)];
  const kept = runs.slice(0, KEEP);
  storage.setItem(`nodeloom.app.${slug}`, JSON.stringify(kept));
  return kept;
}

/** One random id per browser: the app's per-visitor rate limit counts by it. */
export function visitorSession(storage: Storage): string {
  let session = storage.getItem(SESSION_KEY);
  if (!session) {
    session = crypto.randomUUID();
    storage.setItem(SESSION_KEY, session);
  }
  return session;
}

/** The problem's sentence, or a generic one. */
export async function problemText(response: Response): Promise<string> {
  try {
    const body = (await response.json()) as { detail?: string };
    return body.detail ?? `HTTP ${response.status}`;
  } catch {
    return `HTTP ${response.status}`;
  }
}

/** The run's body: JSON when the form has no files, else multipart (files by their key). */
export function runBody(
  fields: FormField[],
  values: Record<string, string>,
  files: Record<string, File | undefined>,
): { body: BodyInit; json: boolean } {
  const input: Record<string, string> = {};
  for (const field of fields) {
    const value = values[field.key];
    if (field.kind === "text" && value !== undefined) input[field.key] = value;
  }
  const attached = fields.filter((f) => f.kind !== "text" && files[f.key]);
  if (attached.length === 0) return { body: JSON.stringify({ input }), json: true };
  const form = new FormData();
  form.append("input", JSON.stringify(input));
  for (const field of attached) form.append(field.key, files[field.key] as File);
  return { body: form, json: false };
}

export function apiPath(slug: string, rest = ""): string {
  return `/api/v1/public/apps/${encodeURIComponent(slug)}${rest}`;
}

/** A challenge still worth solving: more than a minute before it expires. */
export function usable(challenge: Pick<Challenge, "expires_at">, now = Date.now()): boolean {
  return Date.parse(challenge.expires_at) - now > 60_000;
}
