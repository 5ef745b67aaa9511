// An HttpRequest node outputs the kind its `output` param names: text (body, json) or an
// image, audio or video the answer is made into (docs/nodes.md). The server binds its output
// to that kind when the graph is checked, and the editor does the same with a spec per media
// kind, kept in the catalog under `HttpRequest:<kind>` (`specKey`).
import type { NodeType } from "../api/types";

export const HTTP_REQUEST_TYPE = "HttpRequest";
const KINDS = ["image", "audio", "video"] as const;

/** The catalog key of an HttpRequest node with `output` (text: the spec as listed). */
export function httpRequestKey(data: Record<string, unknown> | undefined): string {
  const output = data?.output;
  return typeof output === "string" && (KINDS as readonly string[]).includes(output)
    ? `${HTTP_REQUEST_TYPE}:${output}`
    : HTTP_REQUEST_TYPE;
}

/** `catalog` plus an HttpRequest spec bound to each media kind. */
export function withHttpRequestKinds(catalog: Map<string, NodeType>): Map<string, NodeType> {
  const base = catalog.get(HTTP_REQUEST_TYPE);
  if (!base) return catalog;
  for (const kind of KINDS) {
    const bound = kind as NodeType["output"]["kind"];
    catalog.set(`${HTTP_REQUEST_TYPE}:${kind}`, {
      ...base,
      output: { ...base.output, kind: bound },
    });
  }
  return catalog;
}
