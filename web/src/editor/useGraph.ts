import { useCallback, useEffect, useRef, useState } from "react";
import { useEdgesState, useNodesState, type EdgeChange, type NodeChange } from "@xyflow/react";
import type { FlowEdge, FlowNode } from "../graph/convert";
import { useHistory } from "./useHistory";

/** The graph the editor holds: its nodes and edges, refs that always name the current ones
 * (callbacks read them without being rebuilt at each change), whether it differs from what was
 * saved, and undo/redo over it. React Flow's own changes go through ``onNodesChange`` /
 * ``onEdgesChange``, which record an undo step and mark the graph changed where the user did. */
export function useGraph(initial: { nodes: FlowNode[]; edges: FlowEdge[] }) {
  const [nodes, setNodes, applyNodeChanges] = useNodesState<FlowNode>(initial.nodes);
  const [edges, setEdges, applyEdgeChanges] = useEdgesState<FlowEdge>(initial.edges);
  const nodesRef = useRef(nodes);
  const edgesRef = useRef(edges);
  useEffect(() => {
    nodesRef.current = nodes;
    edgesRef.current = edges;
  }, [nodes, edges]);
  const [dirty, setDirty] = useState(false);

  const snapshot = useCallback(() => ({ nodes: nodesRef.current, edges: edgesRef.current }), []);
  const restore = useCallback(
    (s: { nodes: FlowNode[]; edges: FlowEdge[] }) => {
      setNodes(s.nodes);
      setEdges(s.edges);
      setDirty(true);
    },
    [setNodes, setEdges],
  );
  const history = useHistory(snapshot, restore);

  const onNodesChange = useCallback(
    (changes: NodeChange<FlowNode>[]) => {
      if (changes.some((c) => c.type === "remove")) history.record();
      if (
        changes.some(
          (c) => c.type === "remove" || c.type === "add" || (c.type === "position" && c.dragging),
        )
      ) {
        setDirty(true);
      }
      applyNodeChanges(changes);
    },
    [history, applyNodeChanges],
  );
  const onEdgesChange = useCallback(
    (changes: EdgeChange<FlowEdge>[]) => {
      if (changes.some((c) => c.type === "remove")) {
        history.record();
        setDirty(true);
      }
      applyEdgeChanges(changes);
    },
    [history, applyEdgeChanges],
  );

  return {
    nodes,
    edges,
    setNodes,
    setEdges,
    nodesRef,
    edgesRef,
    dirty,
    setDirty,
    history,
    onNodesChange,
    onEdgesChange,
  };
}

export type Graph = ReturnType<typeof useGraph>;
