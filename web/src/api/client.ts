// The one way the app talks to the API: openapi-fetch typed by the generated schema, with
// the session's JWT added to every request and problem+json turned into ApiError.
import createClient, { type Middleware } from "openapi-fetch";
import type { paths } from "./schema";
import type { Problem } from "./types";
import { clearToken, getToken } from "./session";

export class ApiError extends Error {
  readonly problem: Problem;
  constructor(problem: Problem) {
    super(problem.detail || problem.title || `HTTP ${problem.status}`);
    this.problem = problem;
  }
  get status(): number {
    return this.problem.status;
  }
}

const auth: Middleware = {
  onRequest({ request }) {
    const token = getToken();
    if (token && !request.headers.has("Authorization")) {
      request.headers.set("Authorization", `Bearer ${token}`);
    }
    return request;
  },
  onResponse({ response, request }) {
    // An expired or revoked session: forget it, the app shows the log-in page.
    if (response.status === 401 && !request.url.includes("/auth/login") && getToken()) {
      clearToken();
    }
    return response;
  },
};

export const api = createClient<paths>({ baseUrl: "" });
api.use(auth);

/** The data of an openapi-fetch result, or an ApiError carrying the problem. */
export function unwrap<T>(result: { data?: T; error?: unknown; response: Response }): T {
  if (result.error !== undefined || !result.response.ok) {
    const body = result.error as Partial<Problem> | undefined;
    throw new ApiError({
      ...(typeof body === "object" && body ? body : {}),
      status: result.response.status,
    } as Problem);
  }
  return result.data as T;
}

/** The path and query of an absolute URL the API built from its configured base URL, so the
 * browser fetches it from the origin it is on. */
export function sameOrigin(url: string): string {
  const parsed = new URL(url, window.location.origin);
  return parsed.pathname + parsed.search;
}
