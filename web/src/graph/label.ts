// A node's name: React Flow's `data.label`, kept beside the params (the server ignores it
// when it reads them). The server refuses at save what `labelProblem` refuses here.
import type { GraphJson } from "../api/types";

export const LABEL_MAX = 80;

/** The node's name, or undefined when it has none (absent, not a string, blank). */
export function nodeLabel(data: Record<string, unknown> | undefined | null): string | undefined {
  const label = data?.label;
  return typeof label === "string" && label.trim() ? label : undefined;
}

// Control (Cc), format (Cf) and line/paragraph separators: the server's refusal.
const FORBIDDEN = /[\p{Cc}\p{Cf}\u2028\u2029]/u;

/** Why a typed name cannot be saved, or null when it can ("" removes the name). */
export function labelProblem(text: string): string | null {
  if (text === "") return null;
  if (!text.trim()) return "A name cannot be only spaces.";
  if ([...text].length > LABEL_MAX) return `A name has at most ${LABEL_MAX} characters.`;
  if (FORBIDDEN.test(text)) return "A name is one line, without control characters.";
  return null;
}

/** How a node is named to a person: its name, else its id. */
export function shownName(node: { id: string; data?: Record<string, unknown> | null }): string {
  return nodeLabel(node.data ?? undefined) ?? node.id;
}

/** Node id -> name, for the nodes of `graph` that have one. */
export function labelsOf(graph: GraphJson | null): Map<string, string> {
  const found = new Map<string, string>();
  for (const node of graph?.nodes ?? []) {
    const label = nodeLabel(node.data as Record<string, unknown> | undefined);
    if (label) found.set(node.id, label);
  }
  return found;
}
