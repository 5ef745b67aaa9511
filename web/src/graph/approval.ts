// An Approval node judges a value of the kind its `kind` param names and passes it on
// (docs/approvals.md): the server binds its input and output to that kind when the graph is
// checked, and the editor does the same with a spec per kind, kept in the catalog under
// `Approval:<kind>` (`specKey`).
import type { NodeType } from "../api/types";

export const APPROVAL_TYPE = "Approval";
const KINDS = ["json", "image", "audio", "video"] as const;

/** The catalog key of an Approval node of `kind` (text: the spec as listed). */
export function approvalKey(data: Record<string, unknown> | undefined): string {
  const kind = data?.kind;
  return typeof kind === "string" && (KINDS as readonly string[]).includes(kind)
    ? `${APPROVAL_TYPE}:${kind}`
    : APPROVAL_TYPE;
}

/** `catalog` plus an Approval spec bound to each kind other than text. */
export function withApprovalKinds(catalog: Map<string, NodeType>): Map<string, NodeType> {
  const base = catalog.get(APPROVAL_TYPE);
  if (!base) return catalog;
  for (const kind of KINDS) {
    const bound = kind as NodeType["output"]["kind"];
    catalog.set(`${APPROVAL_TYPE}:${kind}`, {
      ...base,
      inputs: base.inputs.map((input) => ({ ...input, kind: bound })),
      output: { ...base.output, kind: bound },
    });
  }
  return catalog;
}
