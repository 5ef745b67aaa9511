import { useCallback, type RefObject } from "react";
import { useReactFlow, type Connection } from "@xyflow/react";
import type { NodeType } from "../api/types";
import { newNodeId, type FlowEdge, type FlowNode } from "../graph/convert";
import { newEdgeId } from "../graph/clipboard";
import { OUTPUT_HANDLE, firstOutput, refusal, targetInput } from "../graph/kinds";
import { specKey } from "../graph/subworkflow";
import {
  GROUP_TYPE,
  deletionKeepingMembers,
  groupNodes,
  isGroup,
  releaseMembers,
  ungroupNodes,
} from "../graph/group";
import { REMOVE } from "../forms/SchemaForm";
import type { Graph } from "./useGraph";

/** Every edit of the graph made by the editor's own controls (the palette, the details panel,
 * connecting handles, grouping): each records one undo step and marks the graph changed.
 * ``canvas`` is where "the middle of the view" is measured; ``notify`` says why a connection
 * or a group was refused. */
export function useGraphEdits(
  graph: Graph,
  catalog: Map<string, NodeType>,
  canvas: RefObject<HTMLDivElement | null>,
  notify: (message: string) => void,
) {
  const { nodesRef, edgesRef, setNodes, setEdges, setDirty, history } = graph;
  const rf = useReactFlow<FlowNode, FlowEdge>();

  const addNode = useCallback(
    (
      type: string,
      position?: { x: number; y: number },
      data: Record<string, unknown> = {},
    ): string => {
      let at = position;
      if (!at) {
        // Pressed in the palette: the middle of the view, moved aside from nodes already there.
        const box = canvas.current?.getBoundingClientRect();
        const start = box
          ? rf.screenToFlowPosition({
              x: box.left + box.width / 2 - 100,
              y: box.top + box.height / 3,
            })
          : { x: 0, y: 0 };
        at = start;
        for (let step = 1; step < 50; step++) {
          const spot = at;
          const taken = nodesRef.current.some(
            (n) => Math.abs(n.position.x - spot.x) < 230 && Math.abs(n.position.y - spot.y) < 130,
          );
          if (!taken) break;
          at = { x: start.x + (step % 3) * 250, y: start.y + Math.floor(step / 3) * 150 };
        }
      }
      history.record();
      const id = newNodeId(
        type,
        nodesRef.current.map((n) => n.id),
      );
      const added: FlowNode = { id, type, position: at, data, selected: true };
      nodesRef.current = [
        ...nodesRef.current.map((n) => (n.selected ? { ...n, selected: false } : n)),
        added,
      ];
      setNodes((ns) => [...ns.map((n) => (n.selected ? { ...n, selected: false } : n)), added]);
      setDirty(true);
      return id;
    },
    [canvas, history, nodesRef, rf, setDirty, setNodes],
  );

  const isValidConnection = useCallback(
    (c: Connection | FlowEdge) => refusal(c, nodesRef.current, edgesRef.current, catalog) === null,
    [catalog, edgesRef, nodesRef],
  );

  const onConnect = useCallback(
    (c: Connection) => {
      const why = refusal(c, nodesRef.current, edgesRef.current, catalog);
      if (why) {
        notify(why);
        return;
      }
      history.record();
      setEdges((es) => [
        ...es,
        {
          id: newEdgeId(c.source, c.target, c.targetHandle, es),
          source: c.source,
          target: c.target,
          sourceHandle: c.sourceHandle ?? OUTPUT_HANDLE,
          targetHandle: c.targetHandle,
        },
      ]);
      setDirty(true);
    },
    [catalog, edgesRef, history, nodesRef, notify, setDirty, setEdges],
  );

  /** The details panel's input picker: ``input`` of ``nodeId`` fed by ``sourceId`` (its first
   * output), or by nothing. */
  const connectInput = useCallback(
    (nodeId: string, input: string, sourceId: string | null) => {
      const found = nodesRef.current.find((n) => n.id === nodeId);
      const spec = found ? catalog.get(specKey(found)) : undefined;
      if (!spec) return;
      history.record();
      setEdges((es) => {
        const kept = es.filter(
          (e) => !(e.target === nodeId && targetInput(spec, e.targetHandle) === input),
        );
        if (!sourceId) return kept;
        const from = nodesRef.current.find((n) => n.id === sourceId);
        const fromSpec = from ? catalog.get(specKey(from)) : undefined;
        return [
          ...kept,
          {
            id: newEdgeId(sourceId, nodeId, input, kept),
            source: sourceId,
            target: nodeId,
            sourceHandle: fromSpec ? firstOutput(fromSpec, from?.data) : OUTPUT_HANDLE,
            targetHandle: input,
          },
        ];
      });
      setDirty(true);
    },
    [catalog, history, nodesRef, setDirty, setEdges],
  );

  const setParam = useCallback(
    (nodeId: string, param: string, value: unknown) => {
      history.record(`param:${nodeId}:${param}`);
      setNodes((ns) =>
        ns.map((n) => {
          if (n.id !== nodeId) return n;
          const data = { ...n.data };
          if (value === REMOVE) delete data[param];
          else data[param] = value;
          return { ...n, data };
        }),
      );
      setDirty(true);
    },
    [history, setDirty, setNodes],
  );

  const editNote = useCallback(
    (nodeId: string, text: string) => setParam(nodeId, "text", text),
    [setParam],
  );

  const rename = useCallback(
    (nodeId: string, label: string) => setParam(nodeId, "label", label === "" ? REMOVE : label),
    [setParam],
  );

  /** Ctrl+G: the selected nodes framed in a new group, selected so it can be named. */
  const groupSelection = useCallback(() => {
    const current = nodesRef.current;
    const id = newNodeId(
      GROUP_TYPE,
      current.map((n) => n.id),
    );
    const chosen = current.filter((n) => n.selected).map((n) => n.id);
    const grouped = groupNodes(current, chosen, id, "Group");
    if (!grouped) {
      notify("Select the nodes to group first.");
      return;
    }
    history.record();
    setNodes(grouped.map((n) => ({ ...n, selected: n.id === id })));
    setDirty(true);
  }, [history, nodesRef, notify, setDirty, setNodes]);

  const ungroup = useCallback(
    (groupId: string) => {
      history.record();
      setNodes((ns) => ungroupNodes(ns, groupId));
      setDirty(true);
    },
    [history, setDirty, setNodes],
  );

  /** Ctrl+Shift+G: every selected group removed, its members kept. */
  const ungroupSelection = useCallback(() => {
    for (const n of nodesRef.current) if (n.selected && isGroup(n)) ungroup(n.id);
  }, [nodesRef, ungroup]);

  /** Deleting a group keeps the nodes in it (not chosen themselves) where they are. */
  const onBeforeDelete = useCallback(
    async (doomed: { nodes: FlowNode[]; edges: FlowEdge[] }) => {
      const plan = deletionKeepingMembers(doomed);
      if (plan.keep.size > 0) {
        const groups = new Set(plan.nodes.filter(isGroup).map((n) => n.id));
        setNodes((ns) => releaseMembers(ns, groups));
      }
      return { nodes: plan.nodes, edges: plan.edges };
    },
    [setNodes],
  );

  return {
    addNode,
    isValidConnection,
    onConnect,
    connectInput,
    setParam,
    editNote,
    rename,
    groupSelection,
    ungroup,
    ungroupSelection,
    onBeforeDelete,
  };
}

export type GraphEdits = ReturnType<typeof useGraphEdits>;
