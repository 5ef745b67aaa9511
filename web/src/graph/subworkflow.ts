// A Workflow node's interface is its child workflow's (docs/subworkflows.md): one optional
// text input per TextInput of the child (named by its `key`, or `text`), and the child's one
// output node's kind as output. The editor draws and checks a Workflow node with a spec
// bound to its child, kept in the catalog under `Workflow:<workflow id>` (`specKey`).
import type { NodeType } from "../api/types";
import { APPROVAL_TYPE, approvalKey } from "./approval";
import { HTTP_REQUEST_TYPE, httpRequestKey } from "./httpRequest";
import { isGroup } from "./group";
import { isNote } from "./note";

export const WORKFLOW_TYPE = "Workflow";

interface GraphLike {
  nodes?: { id?: unknown; type?: unknown; data?: unknown }[];
  edges?: { source?: unknown }[];
}

/** The catalog key of a node's spec: a Workflow node with a child has its own, and so have
 * an Approval node of a kind other than text (graph/approval.ts) and an HttpRequest node
 * with a media output (graph/httpRequest.ts). */
export function specKey(node: { type?: string; data?: Record<string, unknown> }): string {
  const type = node.type ?? "";
  if (type === APPROVAL_TYPE) return approvalKey(node.data);
  if (type === HTTP_REQUEST_TYPE) return httpRequestKey(node.data);
  const child = node.data?.workflow_id;
  return type === WORKFLOW_TYPE && typeof child === "string" && child
    ? `${WORKFLOW_TYPE}:${child}`
    : type;
}

export interface ChildInterface {
  inputs: string[];
  /** The kind of its one output node, or null when it has none or several. */
  output: string | null;
}

/** What a Workflow node running `graph` takes and gives. */
export function childInterface(graph: GraphLike, catalog: Map<string, NodeType>): ChildInterface {
  const nodes = graph.nodes ?? [];
  const sources = new Set((graph.edges ?? []).map((e) => e.source));
  const inputs: string[] = [];
  for (const n of nodes) {
    if (n.type !== "TextInput") continue;
    const data = (n.data ?? {}) as Record<string, unknown>;
    const name = typeof data.key === "string" && data.key ? data.key : "text";
    if (!inputs.includes(name)) inputs.push(name);
  }
  // A note or a group is on the canvas only: not an output of the child.
  const sinks = nodes.filter((n) => !sources.has(n.id) && !isNote(n) && !isGroup(n));
  const sink = sinks.length === 1 ? sinks[0] : undefined;
  const output = sink ? (catalog.get(String(sink.type))?.output.kind ?? null) : null;
  return { inputs, output };
}

/** `catalog` plus a Workflow spec bound to each child in `children` (by workflow id). */
export function withChildren(
  catalog: Map<string, NodeType>,
  children: Map<string, ChildInterface>,
): Map<string, NodeType> {
  const base = catalog.get(WORKFLOW_TYPE);
  if (!base || children.size === 0) return catalog;
  const out = new Map(catalog);
  for (const [id, child] of children) {
    const kind = (child.output ?? base.output.kind) as NodeType["output"]["kind"];
    out.set(`${WORKFLOW_TYPE}:${id}`, {
      ...base,
      inputs: child.inputs.map((name) => ({
        name,
        kind: "text",
        required: false,
        multiple: false,
      })),
      output: { ...base.output, kind },
    });
  }
  return out;
}
