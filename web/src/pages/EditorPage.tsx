import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useBlocker, useLocation, useParams } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import {
  Background,
  Controls,
  ControlButton,
  MiniMap,
  ReactFlow,
  ReactFlowProvider,
  useEdgesState,
  useNodesState,
  useConnection,
  useReactFlow,
  type Connection,
  type EdgeChange,
  type FinalConnectionState,
  type NodeChange,
  type NodeTypes,
} from "@xyflow/react";
import { ApiError, api, unwrap } from "../api/client";
import { catalogMap, keys, useChildCatalog, useNodeTypes } from "../api/queries";
import { specKey } from "../graph/subworkflow";
import type {
  GraphJson,
  NodeType,
  RunEstimate,
  SavedWorkflow,
  Warning,
  Workflow,
} from "../api/types";
import { fromGraph, newNodeId, toGraph, type FlowEdge, type FlowNode } from "../graph/convert";
import { copySelection, newEdgeId, paste, type Copied } from "../graph/clipboard";
import { importedParams, parseComfyWorkflow, proposeBindings } from "../graph/comfyui";
import {
  OUTPUT_HANDLE,
  edgeToNew,
  refusal,
  refusedHandles,
  edgeLabel,
  firstOutput,
  targetInput,
  type DraggedFrom,
} from "../graph/kinds";
import { placeProblems, type Placed } from "../graph/problems";
import { REMOVE } from "../forms/SchemaForm";
import { ShortcutSheet } from "../editor/ShortcutSheet";
import { NoteView } from "../editor/NoteView";
import { NOTE_TYPE } from "../graph/note";
import { GroupView } from "../editor/GroupView";
import {
  GROUP_TYPE,
  deletionKeepingMembers,
  groupNodes,
  isGroup,
  releaseMembers,
  ungroupNodes,
} from "../graph/group";
import { EditorContext } from "../editor/context";
import { FlowNodeView } from "../editor/FlowNodeView";
import { DRAG_TYPE, NodePalette } from "../editor/NodePalette";
import { SidePanel } from "../editor/SidePanel";
import { EditorToolbar } from "../editor/EditorToolbar";
import { RunDialog } from "../editor/RunDialog";
import { useHistory } from "../editor/useHistory";
import { useRun } from "../editor/useRun";
import { staleNodeIds } from "../graph/outputs";
import { repeatBounds } from "../graph/repeat";
import { QuickAdd } from "../editor/QuickAdd";
import { LeaveDialog } from "../editor/LeaveDialog";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { messageOf } from "../components/forms";
import { INPUT_NODE, keyForFile } from "../assets/media";
import { startUpload } from "../assets/uploads";
import { HistoryPanel } from "../versions/HistoryPanel";

/** What the workflows page passes when it opens a workflow it just made (import, template):
 * fit the graph into view, and show the warnings the create answered with. */
export interface OpenState {
  fit?: boolean;
  warnings?: Warning[];
}

function warningText(count: number, general: string[], opening = false): string {
  const plural = `${count} warning${count === 1 ? "" : "s"}`;
  return `${opening ? `This workflow has ${plural}` : `Saved with ${plural}`}, shown on the nodes they concern. ${
    general.length ? general.join(" ") + " " : ""
  }Running is refused until they are resolved.`;
}

/** "Fit view" leaves the bottom-right corner to the overview (150 × 100 px) and the bottom-left
 * to the zoom controls, so no node is fitted under either. */
const FIT_PADDING = { top: "40px", left: "70px", right: "190px", bottom: "130px" } as const;

export function EditorPage() {
  const { workflowId = "" } = useParams();
  const workflow = useQuery({
    queryKey: keys.workflow(workflowId),
    // The editor owns the graph once loaded: never refetched under it, dropped when it closes.
    staleTime: Infinity,
    gcTime: 0,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflowId } },
        }),
      ),
  });
  const types = useNodeTypes();
  // Survives the editor being opened again on another version (a restore, a reload).
  const [note, setNote] = useState<string | null>(null);
  if (workflow.error) {
    return (
      <main className="page">
        <div className="banner error">{workflow.error.message}</div>
        <Link to="/workflows">Back to workflows</Link>
      </main>
    );
  }
  if (!workflow.data || !types.data) return <p className="page">Loading…</p>;
  return (
    <ReactFlowProvider>
      {/* A new version from the server (reload, restore) opens the editor afresh on it. */}
      <Editor
        key={`${workflow.data.id}:${workflow.data.version}`}
        workflow={workflow.data}
        types={types.data}
        note={note}
        onNote={setNote}
      />
    </ReactFlowProvider>
  );
}

function isTyping(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null;
  return Boolean(
    el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)),
  );
}

function Editor({
  workflow,
  types,
  note,
  onNote,
}: {
  workflow: Workflow;
  types: NodeType[];
  /** Said once when the editor opens (after a restore). */
  note: string | null;
  onNote: (note: string | null) => void;
}) {
  const client = useQueryClient();
  const baseCatalog = useMemo(() => catalogMap(types), [types]);
  const [loaded] = useState(() => fromGraph(workflow.graph_json as unknown as GraphJson));
  const location = useLocation();
  const [opened] = useState((): OpenState & { fromServer?: boolean } => {
    const state = (location.state ?? {}) as OpenState;
    // The warnings the create answered with, else those the server reports for the graph as
    // stored now (a credential deleted since, a provider no longer configured).
    return state.warnings?.length
      ? state
      : { ...state, warnings: workflow.warnings ?? [], fromServer: true };
  });
  const [nodes, setNodes, onNodesChange] = useNodesState<FlowNode>(loaded.nodes);
  // Workflow nodes are drawn and checked with their child's inputs and output.
  const catalog = useChildCatalog(baseCatalog, nodes);
  // Every type on the canvas is drawn by FlowNodeView, including a type the catalog no longer
  // lists (its package was removed): it gets the "Unknown node" placeholder, not React Flow's
  // default node. The key changes only when such a type appears or goes.
  const unknownKey = [...new Set(nodes.map((n) => n.type ?? ""))]
    .filter((t) => !baseCatalog.has(t) && t !== NOTE_TYPE && t !== GROUP_TYPE)
    .sort()
    .join("\n");
  const nodeTypes = useMemo<NodeTypes>(
    () => ({
      ...Object.fromEntries(
        [...types.map((t) => t.type), ...(unknownKey ? unknownKey.split("\n") : [])].map((t) => [
          t,
          FlowNodeView,
        ]),
      ),
      [NOTE_TYPE]: NoteView,
      [GROUP_TYPE]: GroupView,
    }),
    [types, unknownKey],
  );
  const [edges, setEdges, onEdgesChange] = useEdgesState<FlowEdge>(loaded.edges);
  const original = useRef<GraphJson>(loaded.original);
  const nodesRef = useRef(nodes);
  const edgesRef = useRef(edges);
  useEffect(() => {
    nodesRef.current = nodes;
    edgesRef.current = edges;
  }, [nodes, edges]);
  const [name, setName] = useState(workflow.name);
  const [dirty, setDirty] = useState(false);
  const [problems, setProblems] = useState<Placed | null>(null);
  const [warnings, setWarnings] = useState<Placed | null>(() =>
    opened.warnings?.length ? placeProblems(opened.warnings, loaded.original) : null,
  );
  const [banner, setBanner] = useState<{ kind: "ok" | "error" | "warn"; text: string } | null>(
    () =>
      note
        ? { kind: "ok", text: note }
        : opened.warnings?.length
          ? {
              kind: "warn",
              text: warningText(
                opened.warnings.length,
                placeProblems(opened.warnings, loaded.original).general,
                opened.fromServer,
              ),
            }
          : null,
  );
  const [drawer, setDrawer] = useState<"palette" | "details" | null>(null);
  const [quickAdd, setQuickAdd] = useState<{
    screen: { x: number; y: number };
    at: { left: number; top: number };
    from: DraggedFrom | null;
  } | null>(null);
  // An opened drawer (narrow screens) takes the focus, so the keyboard continues there.
  useEffect(() => {
    if (drawer === "palette") document.getElementById("palette-search")?.focus();
    if (drawer === "details")
      document.querySelector<HTMLElement>("#editor-details .drawer-close")?.focus();
  }, [drawer]);
  const openQuickAdd = useCallback((x: number, y: number, from: DraggedFrom | null) => {
    const box = canvas.current?.getBoundingClientRect();
    if (!box) return;
    // Kept inside the canvas: the menu is about 260 x 320 pixels.
    const left = Math.max(4, Math.min(x - box.left, box.width - 264));
    const top = Math.max(4, Math.min(y - box.top, box.height - 324));
    setQuickAdd({ screen: { x, y }, at: { left, top }, from });
  }, []);
  const [toast, setToast] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [runOpen, setRunOpen] = useState(false);
  const [estimate, setEstimate] = useState<RunEstimate | null>(null);
  // The version this editor holds: sent as If-Match, so a save never overwrites another
  // tab's (or person's) save unseen; a 412 sets ``conflict`` to the version saved since.
  const [version, setVersion] = useState(workflow.version);
  const [conflict, setConflict] = useState<number | null>(null);
  const [historyOpen, setHistoryOpen] = useState(false);
  const [restoring, setRestoring] = useState(false);
  const [confirmRestore, setConfirmRestore] = useState<number | null>(null);
  useEffect(() => {
    if (note) onNote(null);
  }, [note, onNote]);
  const [runError, setRunError] = useState<string | null>(null);
  const clipboard = useRef<Copied | null>(null);
  const canvas = useRef<HTMLDivElement>(null);
  const rf = useReactFlow<FlowNode, FlowEdge>();
  const runner = useRun(workflow.id);
  // The graph the shown run was started from: the graph as opened (the newest run is shown on
  // opening), then the graph of each run started here. Outputs of nodes changed since, or
  // downstream of a change, are marked stale.
  const [overview, setOverview] = useState(true);
  const [ranGraph, setRanGraph] = useState(() => ({
    nodes: loaded.nodes,
    edges: loaded.edges,
    here: false,
  }));

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

  useEffect(() => {
    if (!toast) return;
    const timer = setTimeout(() => setToast(null), 4000);
    return () => clearTimeout(timer);
  }, [toast]);

  const handleNodesChange = useCallback(
    (changes: NodeChange<FlowNode>[]) => {
      if (changes.some((c) => c.type === "remove")) history.record();
      if (
        changes.some(
          (c) => c.type === "remove" || c.type === "add" || (c.type === "position" && c.dragging),
        )
      ) {
        setDirty(true);
      }
      onNodesChange(changes);
    },
    [history, onNodesChange],
  );
  const handleEdgesChange = useCallback(
    (changes: EdgeChange<FlowEdge>[]) => {
      if (changes.some((c) => c.type === "remove")) {
        history.record();
        setDirty(true);
      }
      onEdgesChange(changes);
    },
    [history, onEdgesChange],
  );

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
    [history, rf, setNodes],
  );

  /** The quick-add menu's choice: a node where it was opened, joined to the handle the
   * connection was dragged from when it was opened that way. */
  const quickAddNode = useCallback(
    (type: string) => {
      if (!quickAdd) return;
      const { screen, from } = quickAdd;
      setQuickAdd(null);
      const at = rf.screenToFlowPosition(screen);
      // A node feeding the dragged input goes to the left of where the connection was let go.
      const position = from?.type === "target" ? { x: at.x - 220, y: at.y - 20 } : at;
      const before = nodesRef.current;
      const id = addNode(type, position);
      const edge = from ? edgeToNew(from, id, type, before, edgesRef.current, catalog) : null;
      if (edge) {
        setEdges((es) => [
          ...es,
          { id: newEdgeId(edge.source, edge.target, edge.targetHandle, es), ...edge },
        ]);
      }
    },
    [addNode, catalog, quickAdd, rf, setEdges],
  );

  const isValidConnection = useCallback(
    (c: Connection | FlowEdge) => refusal(c, nodesRef.current, edgesRef.current, catalog) === null,
    [catalog],
  );

  const onConnect = useCallback(
    (c: Connection) => {
      const why = refusal(c, nodesRef.current, edgesRef.current, catalog);
      if (why) {
        setToast(why);
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
    [catalog, history, setEdges],
  );

  const onConnectEnd = useCallback(
    (event: MouseEvent | TouchEvent, state: FinalConnectionState) => {
      if (state.isValid || !state.fromNode || !state.fromHandle) return;
      if (!state.toHandle) {
        // Let go on the empty canvas: offer the quick-add menu, connected to this handle.
        const point = "changedTouches" in event ? event.changedTouches[0] : event;
        if (!point) return;
        const under = document.elementFromPoint(point.clientX, point.clientY);
        if (!under?.classList.contains("react-flow__pane")) return;
        openQuickAdd(point.clientX, point.clientY, {
          nodeId: state.fromNode.id,
          handleId: state.fromHandle.id ?? null,
          type: state.fromHandle.type,
        });
        return;
      }
      if (!state.toNode) return;
      const forward = state.fromHandle.type === "source";
      const source = forward ? state.fromNode : state.toNode;
      const target = forward ? state.toNode : state.fromNode;
      const handle = forward ? state.toHandle : state.fromHandle;
      const out = forward ? state.fromHandle : state.toHandle;
      const why = refusal(
        {
          source: source.id,
          target: target.id,
          sourceHandle: out.id ?? null,
          targetHandle: handle.id ?? null,
        },
        nodesRef.current,
        edgesRef.current,
        catalog,
      );
      if (why) setToast(`Not connected: ${why}`);
    },
    [catalog, openQuickAdd],
  );

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
    [catalog, history, setEdges],
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
    [history, setNodes],
  );

  const [shortcutsOpen, setShortcutsOpen] = useState(false);

  const editNote = useCallback(
    (nodeId: string, text: string) => setParam(nodeId, "text", text),
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
      setToast("Select the nodes to group first.");
      return;
    }
    history.record();
    setNodes(grouped.map((n) => ({ ...n, selected: n.id === id })));
    setDirty(true);
  }, [history, setNodes]);

  const ungroup = useCallback(
    (groupId: string) => {
      history.record();
      setNodes((ns) => ungroupNodes(ns, groupId));
      setDirty(true);
    },
    [history, setNodes],
  );

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

  const rename = useCallback(
    (nodeId: string, label: string) => setParam(nodeId, "label", label === "" ? REMOVE : label),
    [setParam],
  );

  const save = useCallback(async (): Promise<boolean> => {
    const graph = toGraph(nodesRef.current, edgesRef.current, rf.getViewport(), original.current);
    setSaving(true);
    setBanner(null);
    try {
      const saved: SavedWorkflow = unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}", {
          params: {
            path: { workflow_id: workflow.id },
            header: { "If-Match": `"v${version}"` },
          },
          body: { name: name.trim() || workflow.name, graph_json: graph } as never,
        }),
      );
      original.current = saved.graph_json as unknown as GraphJson;
      setVersion(saved.version);
      setConflict(null);
      setProblems(null);
      setDirty(false);
      // Accepted, with things to say (a node type this server cannot run): shown on their
      // nodes, amber, without blocking the save. The pointers name the graph just sent.
      const found = saved.warnings ?? [];
      const placedWarnings = found.length ? placeProblems(found, graph) : null;
      setWarnings(placedWarnings);
      setBanner(
        placedWarnings
          ? { kind: "warn", text: warningText(found.length, placedWarnings.general) }
          : { kind: "ok", text: "Saved." },
      );
      void client.invalidateQueries({ queryKey: keys.workflows });
      return true;
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 412) {
        const now = (exc.problem as { current_version?: unknown }).current_version;
        setConflict(typeof now === "number" ? now : version + 1);
        return false;
      }
      if (exc instanceof ApiError && exc.problem.errors?.length) {
        const placed = placeProblems(exc.problem.errors, graph);
        setProblems(placed);
        const count = exc.problem.errors.length;
        setBanner({
          kind: "error",
          text: `Not saved: ${count} problem${count === 1 ? "" : "s"}, shown on the nodes and edges they concern.${
            placed.general.length ? " " + placed.general.join(" ") : ""
          }`,
        });
      } else {
        setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
      }
      return false;
    } finally {
      setSaving(false);
    }
  }, [client, name, rf, version, workflow.id, workflow.name]);

  /** The workflow as saved now, opened afresh (what this editor holds is dropped). */
  const reload = useCallback(async () => {
    try {
      const fresh = unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflow.id } },
        }),
      );
      client.setQueryData(keys.workflow(workflow.id), fresh);
    } catch (exc) {
      setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
    }
  }, [client, workflow.id]);

  /** Restore version ``n`` as a new version, then open it. */
  const restoreVersion = useCallback(
    async (n: number) => {
      setConfirmRestore(null);
      setRestoring(true);
      try {
        const restored = unwrap(
          await api.POST("/api/v1/workflows/{workflow_id}/versions/{version}/restore", {
            params: {
              path: { workflow_id: workflow.id, version: n },
              header: { "If-Match": `"v${version}"` },
            },
            body: {} as never,
          }),
        );
        onNote(`Restored version ${n}: it is now version ${restored.version}.`);
        void client.invalidateQueries({ queryKey: keys.workflows });
        client.setQueryData(keys.workflow(workflow.id), restored);
      } catch (exc) {
        if (exc instanceof ApiError && exc.status === 412) {
          const now = (exc.problem as { current_version?: unknown }).current_version;
          setConflict(typeof now === "number" ? now : version + 1);
        } else if (exc instanceof ApiError && exc.problem.errors?.length) {
          setBanner({
            kind: "error",
            text: `Version ${n} cannot be restored here: ${exc.problem.errors
              .map((e) => e.message)
              .join("; ")}`,
          });
        } else {
          setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
        }
      } finally {
        setRestoring(false);
      }
    },
    [client, onNote, version, workflow.id],
  );

  const openRun = useCallback(async () => {
    if (dirty && !(await save())) return;
    setRunError(null);
    setEstimate(null);
    setRunOpen(true);
    try {
      setEstimate(
        unwrap(
          await api.GET("/api/v1/workflows/{workflow_id}/estimate", {
            params: { path: { workflow_id: workflow.id } },
          }),
        ),
      );
    } catch (exc) {
      setRunError(exc instanceof Error ? exc.message : String(exc));
    }
  }, [dirty, save, workflow.id]);

  const startRun = useCallback(
    async (input: Record<string, unknown> | null, cache: boolean): Promise<string | null> => {
      try {
        await runner.start(
          nodesRef.current.map((n) => n.id),
          input,
          cache,
        );
        setRanGraph({ nodes: nodesRef.current, edges: edgesRef.current, here: true });
        setRunOpen(false);
        return null;
      } catch (exc) {
        if (exc instanceof ApiError && exc.problem.errors?.length) {
          setProblems(placeProblems(exc.problem.errors, original.current));
        }
        const why = exc instanceof Error ? exc.message : String(exc);
        setRunError(why);
        return why;
      }
    },
    [runner],
  );

  /** "Run again" / "Run without cache": the input of the run shown, no dialog. */
  const runAgain = useCallback(
    async (cache: boolean) => {
      if (dirty && !(await save())) return;
      setRunError(null);
      const why = await startRun(runner.run?.input ?? null, cache);
      if (why) setToast(`Not started: ${why}`);
    },
    [dirty, runner.run, save, startRun],
  );

  /** "Retry with this version": the shown failed or cancelled run, retried with the
   * workflow as saved now (saved first), reusing what still matches. */
  const retryCurrent = useCallback(async () => {
    if (dirty && !(await save())) return;
    setRunError(null);
    try {
      await runner.retryCurrent(nodesRef.current.map((n) => n.id));
      setRanGraph({ nodes: nodesRef.current, edges: edgesRef.current, here: true });
    } catch (exc) {
      if (exc instanceof ApiError && exc.problem.errors?.length) {
        setProblems(placeProblems(exc.problem.errors, original.current));
      }
      const why = exc instanceof Error ? exc.message : String(exc);
      setRunError(why);
      setToast(`Not retried: ${why}`);
    }
  }, [dirty, runner, save]);

  const copy = useCallback(() => {
    const copied = copySelection(nodesRef.current, edgesRef.current);
    if (!copied) return;
    clipboard.current = copied;
    const count = copied.nodes.length;
    setToast(`Copied ${count} node${count === 1 ? "" : "s"}.`);
  }, []);

  const pasteCopy = useCallback(() => {
    if (!clipboard.current) return;
    history.record();
    const result = paste(clipboard.current, nodesRef.current, edgesRef.current);
    setNodes(result.nodes);
    setEdges(result.edges);
    clipboard.current = result.pasted;
    setDirty(true);
  }, [history, setEdges, setNodes]);

  /** Pasted text that is a ComfyUI workflow becomes a ComfyUIWorkflow node with its bindings
   * proposed (graph/comfyui.ts); false when the text is not one. */
  const importComfy = useCallback(
    (text: string): boolean => {
      const parsed = parseComfyWorkflow(text);
      if (!parsed) return false;
      if ("error" in parsed) {
        setToast(parsed.error);
        return true;
      }
      const proposal = proposeBindings(parsed.workflow);
      if (!catalog.has(proposal.nodeType)) {
        setToast(`This server has no ${proposal.nodeType} node.`);
        return true;
      }
      addNode(proposal.nodeType, undefined, importedParams(proposal));
      const count = proposal.bindings.length;
      setToast(
        `Imported a ComfyUI workflow with ${count} binding${count === 1 ? "" : "s"} proposed: ` +
          "connect its inputs and pick your ComfyUI credential.",
      );
      return true;
    },
    [addNode, catalog],
  );

  /** Files dropped on the canvas (or a pasted image): each is uploaded (the top bar shows
   * the progress) and, once the server has read what it is, becomes an Image, Audio or
   * Video input node bound to its asset, with a key made from the file's name, so the run
   * dialog offers it and other files can be given for it. */
  const addMediaNodes = useCallback(
    async (files: File[], position?: { x: number; y: number }) => {
      let offset = 0;
      await Promise.all(
        files.map(async (file) => {
          try {
            const { asset } = await startUpload(file);
            const type = INPUT_NODE[asset.kind];
            const at = position
              ? { x: position.x + offset * 40, y: position.y + offset * 160 }
              : undefined;
            offset++;
            addNode(type, at, { key: keyForFile(file.name, nodesRef.current), asset: asset.id });
            void client.invalidateQueries({ queryKey: ["assets"] });
          } catch (exc) {
            setToast(`${file.name} not uploaded: ${messageOf(exc)}`);
          }
        }),
      );
    },
    [addNode, client],
  );

  // Ctrl+V pastes what the browser's clipboard holds when it is a ComfyUI workflow, else the
  // nodes copied on the canvas: the paste event (which carries the clipboard's text) decides,
  // and a browser that sends none gets the copied nodes after the key press.
  const pendingPaste = useRef(false);
  useEffect(() => {
    const onPaste = (event: ClipboardEvent) => {
      if (isTyping(event.target) || runOpen) return;
      pendingPaste.current = false;
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length) {
        event.preventDefault();
        void addMediaNodes(files);
        return;
      }
      if (importComfy(event.clipboardData?.getData("text/plain") ?? "")) {
        event.preventDefault();
        return;
      }
      pasteCopy();
    };
    window.addEventListener("paste", onPaste);
    return () => window.removeEventListener("paste", onPaste);
  }, [addMediaNodes, importComfy, pasteCopy, runOpen]);

  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      const mod = event.ctrlKey || event.metaKey;
      if (!mod && !event.altKey && event.key === "?" && !isTyping(event.target) && !runOpen) {
        event.preventDefault();
        setShortcutsOpen(true);
        return;
      }
      if (!mod) return;
      const key = event.key.toLowerCase();
      if (key === "s") {
        event.preventDefault();
        void save();
        return;
      }
      if (isTyping(event.target) || runOpen) return;
      if (key === "z" && !event.shiftKey) history.undo();
      else if ((key === "z" && event.shiftKey) || key === "y") history.redo();
      else if (key === "c") copy();
      else if (key === "g" && !event.shiftKey) groupSelection();
      else if (key === "g" && event.shiftKey) {
        for (const n of nodesRef.current) if (n.selected && isGroup(n)) ungroup(n.id);
      } else if (key === "v") {
        pendingPaste.current = true;
        setTimeout(() => {
          if (!pendingPaste.current) return;
          pendingPaste.current = false;
          pasteCopy();
        }, 0);
        return; // the browser's paste event follows, with the clipboard's text
      } else return;
      event.preventDefault();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [copy, groupSelection, history, pasteCopy, runOpen, save, ungroup]);

  // Unsaved changes are never lost silently: leaving by an in-app link, back or forward asks
  // first (LeaveDialog); closing or reloading the tab gets the browser's own question.
  const blocker = useBlocker(
    ({ currentLocation, nextLocation }) =>
      dirty && currentLocation.pathname !== nextLocation.pathname,
  );
  useEffect(() => {
    if (!dirty) return;
    const onBeforeUnload = (event: BeforeUnloadEvent) => {
      event.preventDefault();
      event.returnValue = "";
    };
    window.addEventListener("beforeunload", onBeforeUnload);
    return () => window.removeEventListener("beforeunload", onBeforeUnload);
  }, [dirty]);

  // While a connection is dragged, every handle it may not end on is painted red.
  const dragging = useConnection((c) =>
    c.inProgress && c.fromHandle
      ? `${c.fromHandle.type}\u0000${c.fromNode.id}\u0000${c.fromHandle.id ?? ""}`
      : null,
  );
  const refused = useMemo(() => {
    if (!dragging) return new Set<string>();
    const [type, nodeId = "", handleId = ""] = dragging.split("\u0000");
    return refusedHandles(
      { nodeId, handleId: handleId || null, type: type === "target" ? "target" : "source" },
      nodes,
      edges,
      catalog,
    );
  }, [dragging, nodes, edges, catalog]);

  // Nodes lower on the canvas are drawn above those higher up: a node's output preview grows
  // downwards, so it passes under the nodes below it and never hides their handles.
  const displayNodes = useMemo(() => {
    const order = [...nodes].sort((a, b) => a.position.y - b.position.y).map((n) => n.id);
    const rank = new Map(order.map((id, i) => [id, i + 1]));
    return nodes.map((n) => ({ ...n, zIndex: rank.get(n.id) ?? 0 }));
  }, [nodes]);

  const quickAddTypes = useMemo(() => {
    const from = quickAdd?.from;
    if (!from) return types;
    return types.filter(
      (t) => edgeToNew(from, "\u0000new", t.type, nodes, edges, catalog) !== null,
    );
  }, [quickAdd, types, nodes, edges, catalog]);

  const displayEdges = useMemo(
    () =>
      edges.map((e) => {
        const messages = problems?.edges.get(e.id);
        if (messages) return { ...e, className: "has-problem", label: messages.join("; ") };
        const label = edgeLabel(e.sourceHandle);
        return label ? { ...e, label, className: `branch-edge ${label}` } : e;
      }),
    [edges, problems],
  );
  // The newest run shown on opening may be of an older version than the one opened: then its
  // own version's graph is the one to compare with (a version never changes: fetched once).
  const shownVersion = runner.run?.workflowVersion ?? null;
  const olderRun = !ranGraph.here && shownVersion !== null && shownVersion !== workflow.version;
  const olderGraph = useQuery({
    queryKey: keys.version(workflow.id, shownVersion ?? 0),
    enabled: olderRun,
    staleTime: Infinity,
    retry: false,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/versions/{version}", {
          params: { path: { workflow_id: workflow.id, version: shownVersion ?? 0 } },
        }),
      ),
  });
  const stale = useMemo(() => {
    const ran =
      olderRun && olderGraph.data
        ? fromGraph(olderGraph.data.graph_json as unknown as GraphJson)
        : ranGraph;
    return staleNodeIds(ran, { nodes, edges });
  }, [olderRun, olderGraph.data, ranGraph, nodes, edges]);
  const repeats = useMemo(() => repeatBounds({ nodes, edges }), [nodes, edges]);
  const context = useMemo(
    () => ({
      catalog,
      live: runner.live,
      problems,
      warnings,
      refused,
      stale,
      repeats,
      rename,
      editNote,
      ungroup,
    }),
    [catalog, runner.live, problems, warnings, refused, stale, repeats, rename, editNote, ungroup],
  );
  const cachedCount = Object.values(runner.live).filter(
    (n) => n.status === "completed" && n.cached,
  ).length;

  return (
    <EditorContext.Provider value={context}>
      <div
        className="editor"
        data-drawer={drawer ?? undefined}
        style={{ flex: 1, minHeight: 0 }}
        onKeyDown={(e) => {
          if (e.key === "Escape" && drawer) setDrawer(null);
        }}
      >
        <NodePalette
          types={types}
          onAdd={(type) => {
            addNode(type);
            setDrawer(null);
          }}
          onClose={() => setDrawer(null)}
        />
        <div className="editor-main">
          <EditorToolbar
            drawer={drawer}
            onDrawer={setDrawer}
            workflowId={workflow.id}
            name={name}
            onName={(value) => {
              setName(value);
              setDirty(true);
            }}
            dirty={dirty}
            saving={saving}
            onSave={() => void save()}
            history={history}
            onFitView={() => void rf.fitView({ padding: FIT_PADDING, maxZoom: 1, duration: 200 })}
            onGroup={groupSelection}
            canGroup={nodes.some((n) => n.selected && !isGroup(n))}
            run={runner.run}
            onCancel={() => void runner.cancel().catch((e: Error) => setToast(e.message))}
            onRun={() => void openRun()}
            onRunAgain={(cache) => void runAgain(cache)}
            onRetryCurrent={() => void retryCurrent()}
            cachedCount={cachedCount}
            version={version}
            historyOpen={historyOpen}
            onHistory={() => {
              setHistoryOpen(!historyOpen);
              setDrawer(historyOpen ? null : "details");
            }}
          />
          {conflict !== null && (
            <div
              className="banner error"
              role="alert"
              data-testid="save-conflict"
              style={{ margin: 8 }}
            >
              Not saved: this workflow was saved elsewhere (another tab or person) since you opened
              it; version {conflict} is the current one now. Reload to open that version (the
              changes made here are dropped), or keep editing here and copy what you need first.{" "}
              <button type="button" className="primary" onClick={() => void reload()}>
                Reload version {conflict}
              </button>
            </div>
          )}
          {/* "Saved." is about the graph as it was saved: gone at the next change, so it
              never stands beside "Unsaved changes". */}
          {banner && !(banner.kind === "ok" && dirty) && (
            <div
              className={`banner ${banner.kind}`}
              role={banner.kind === "error" ? "alert" : "status"}
              data-testid="editor-banner"
              style={{ margin: 8 }}
            >
              {banner.text}
            </div>
          )}
          <div
            className="canvas"
            ref={canvas}
            onDragOver={(e) => {
              if (e.dataTransfer.types.includes(DRAG_TYPE)) {
                e.preventDefault();
                e.dataTransfer.dropEffect = "move";
              } else if (e.dataTransfer.types.includes("Files")) {
                e.preventDefault();
                e.dataTransfer.dropEffect = "copy";
              }
            }}
            onDoubleClick={(e) => {
              if ((e.target as Element).classList.contains("react-flow__pane")) {
                openQuickAdd(e.clientX, e.clientY, null);
              }
            }}
            onDrop={(e) => {
              const at = rf.screenToFlowPosition({ x: e.clientX, y: e.clientY });
              if (e.dataTransfer.files.length && !e.dataTransfer.types.includes(DRAG_TYPE)) {
                e.preventDefault();
                void addMediaNodes([...e.dataTransfer.files], at);
                return;
              }
              const type = e.dataTransfer.getData(DRAG_TYPE);
              if (!type) return;
              e.preventDefault();
              addNode(type, at);
            }}
          >
            <ReactFlow
              nodes={displayNodes}
              edges={displayEdges}
              nodeTypes={nodeTypes}
              onNodesChange={handleNodesChange}
              onEdgesChange={handleEdgesChange}
              onConnect={onConnect}
              onConnectEnd={onConnectEnd}
              isValidConnection={isValidConnection}
              onNodeDragStart={() => history.record()}
              onBeforeDelete={onBeforeDelete}
              defaultViewport={loaded.viewport}
              fitView={opened.fit === true}
              fitViewOptions={{ padding: FIT_PADDING, maxZoom: 1 }}
              zoomOnDoubleClick={false}
              elevateNodesOnSelect={false}
              deleteKeyCode={["Backspace", "Delete"]}
              multiSelectionKeyCode={["Meta", "Control"]}
              minZoom={0.1}
              aria-label="Workflow canvas"
            >
              <Background gap={16} />
              <Controls>
                <ControlButton
                  onClick={() => setOverview(!overview)}
                  aria-pressed={overview}
                  aria-label={overview ? "Hide overview" : "Show overview"}
                  title={overview ? "Hide overview" : "Show overview"}
                >
                  ▣
                </ControlButton>
              </Controls>
              {overview && (
                <MiniMap
                  pannable
                  zoomable
                  ariaLabel="Overview"
                  style={{ width: 150, height: 100 }}
                />
              )}
            </ReactFlow>
            {quickAdd && (
              <QuickAdd
                types={quickAddTypes}
                at={quickAdd.at}
                connecting={quickAdd.from !== null}
                onPick={quickAddNode}
                onClose={() => setQuickAdd(null)}
              />
            )}
            {toast && (
              <div className="toast" role="status">
                {toast}
              </div>
            )}
          </div>
        </div>
        {historyOpen ? (
          <HistoryPanel
            workflowId={workflow.id}
            current={version}
            restoring={restoring}
            onRestore={(n) => (dirty ? setConfirmRestore(n) : void restoreVersion(n))}
            onClose={() => {
              setHistoryOpen(false);
              setDrawer(null);
            }}
          />
        ) : (
          <SidePanel
            title={name}
            nodes={nodes}
            edges={edges}
            runError={runner.run?.error ?? null}
            onParam={setParam}
            onConnectInput={connectInput}
            onDelete={(selection) => void rf.deleteElements(selection)}
            onClose={() => setDrawer(null)}
          />
        )}
      </div>
      <ShortcutSheet open={shortcutsOpen} onClose={() => setShortcutsOpen(false)} />
      <ConfirmDialog
        open={confirmRestore !== null}
        title={`Restore version ${confirmRestore ?? ""}?`}
        confirmLabel="Discard changes and restore"
        onConfirm={() => confirmRestore !== null && void restoreVersion(confirmRestore)}
        onCancel={() => setConfirmRestore(null)}
      >
        <p>The changes not saved here are dropped; the restored version opens in the editor.</p>
      </ConfirmDialog>
      <RunDialog
        open={runOpen}
        nodes={nodes}
        estimate={estimate}
        error={runError}
        onStart={(input, cache) => void startRun(input, cache)}
        onClose={() => setRunOpen(false)}
      />
      <LeaveDialog
        open={blocker.state === "blocked"}
        saving={saving}
        onStay={() => blocker.reset?.()}
        onLeave={() => blocker.proceed?.()}
        onSaveAndLeave={() =>
          void save().then((ok) => (ok ? blocker.proceed?.() : blocker.reset?.()))
        }
      />
    </EditorContext.Provider>
  );
}
