import type { FlowNode } from "../graph/convert";

/** The run's input data the graph reads: one field per key its TextInput nodes take (their
 * `key` param, else "text"), pre-filled with the first such node's own text. */
export function inputFields(nodes: FlowNode[]): { key: string; initial: string }[] {
  const seen = new Map<string, string>();
  for (const node of nodes) {
    if (node.type !== "TextInput") continue;
    const key = typeof node.data.key === "string" && node.data.key ? node.data.key : "text";
    if (!seen.has(key)) seen.set(key, typeof node.data.text === "string" ? node.data.text : "");
  }
  return [...seen.entries()].map(([key, initial]) => ({ key, initial }));
}
