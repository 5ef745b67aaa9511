import { useMemo } from "react";
import { useConnection } from "@xyflow/react";
import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "../graph/convert";
import { refusedHandles } from "../graph/kinds";

/** While a connection is dragged, every handle it may not end on (painted red), as
 * `${nodeId}:${handleId}`; empty otherwise. */
export function useRefusedHandles(
  nodes: FlowNode[],
  edges: FlowEdge[],
  catalog: Map<string, NodeType>,
): ReadonlySet<string> {
  // A string, so the set is rebuilt only when the dragged handle changes, not at every move.
  const dragging = useConnection((c) =>
    c.inProgress && c.fromHandle
      ? `${c.fromHandle.type}\u0000${c.fromNode.id}\u0000${c.fromHandle.id ?? ""}`
      : null,
  );
  return useMemo(() => {
    if (!dragging) return new Set<string>();
    const [type, nodeId = "", handleId = ""] = dragging.split("\u0000");
    return refusedHandles(
      { nodeId, handleId: handleId || null, type: type === "target" ? "target" : "source" },
      nodes,
      edges,
      catalog,
    );
  }, [dragging, nodes, edges, catalog]);
}
