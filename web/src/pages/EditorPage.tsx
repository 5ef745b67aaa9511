import { useCallback, useEffect, useMemo, useRef, useState } from "react";
import { Link, useParams } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import {
  Background,
  Controls,
  MiniMap,
  ReactFlow,
  ReactFlowProvider,
  useEdgesState,
  useNodesState,
  useReactFlow,
  type Connection,
  type EdgeChange,
  type FinalConnectionState,
  type NodeChange,
  type NodeTypes,
} from "@xyflow/react";
import { ApiError, api, unwrap } from "../api/client";
import { catalogMap, keys, useNodeTypes } from "../api/queries";
import type { GraphJson, NodeType, RunEstimate, Workflow } from "../api/types";
import { fromGraph, newNodeId, toGraph, type FlowEdge, type FlowNode } from "../graph/convert";
import { copySelection, newEdgeId, paste, type Copied } from "../graph/clipboard";
import { OUTPUT_HANDLE, refusal, targetInput } from "../graph/kinds";
import { placeProblems, type Placed } from "../graph/problems";
import { REMOVE } from "../forms/SchemaForm";
import { EditorContext } from "../editor/context";
import { FlowNodeView } from "../editor/FlowNodeView";
import { DRAG_TYPE, NodePalette } from "../editor/NodePalette";
import { SidePanel } from "../editor/SidePanel";
import { EditorToolbar } from "../editor/EditorToolbar";
import { RunDialog } from "../editor/RunDialog";
import { useHistory } from "../editor/useHistory";
import { useRun } from "../editor/useRun";

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
      <Editor key={workflow.data.id} workflow={workflow.data} types={types.data} />
    </ReactFlowProvider>
  );
}

function isTyping(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null;
  return Boolean(
    el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)),
  );
}

function Editor({ workflow, types }: { workflow: Workflow; types: NodeType[] }) {
  const client = useQueryClient();
  const catalog = useMemo(() => catalogMap(types), [types]);
  const nodeTypes = useMemo<NodeTypes>(
    () => Object.fromEntries(types.map((t) => [t.type, FlowNodeView])),
    [types],
  );
  const [loaded] = useState(() => fromGraph(workflow.graph_json as unknown as GraphJson));
  const [nodes, setNodes, onNodesChange] = useNodesState<FlowNode>(loaded.nodes);
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
  const [banner, setBanner] = useState<{ kind: "ok" | "error"; text: string } | null>(null);
  const [toast, setToast] = useState<string | null>(null);
  const [saving, setSaving] = useState(false);
  const [runOpen, setRunOpen] = useState(false);
  const [estimate, setEstimate] = useState<RunEstimate | null>(null);
  const [runError, setRunError] = useState<string | null>(null);
  const clipboard = useRef<Copied | null>(null);
  const canvas = useRef<HTMLDivElement>(null);
  const rf = useReactFlow<FlowNode, FlowEdge>();
  const runner = useRun(workflow.id);

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
    (type: string, position?: { x: number; y: number }) => {
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
      setNodes((ns) => [
        ...ns.map((n) => (n.selected ? { ...n, selected: false } : n)),
        { id, type, position: at, data: {}, selected: true },
      ]);
      setDirty(true);
    },
    [history, rf, setNodes],
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
    (_event: MouseEvent | TouchEvent, state: FinalConnectionState) => {
      if (state.isValid || !state.toHandle || !state.fromNode || !state.toNode || !state.fromHandle)
        return;
      const forward = state.fromHandle.type === "source";
      const source = forward ? state.fromNode : state.toNode;
      const target = forward ? state.toNode : state.fromNode;
      const handle = forward ? state.toHandle : state.fromHandle;
      const why = refusal(
        { source: source.id, target: target.id, targetHandle: handle.id ?? null },
        nodesRef.current,
        edgesRef.current,
        catalog,
      );
      if (why) setToast(`Not connected: ${why}`);
    },
    [catalog],
  );

  const connectInput = useCallback(
    (nodeId: string, input: string, sourceId: string | null) => {
      const spec = catalog.get(nodesRef.current.find((n) => n.id === nodeId)?.type ?? "");
      if (!spec) return;
      history.record();
      setEdges((es) => {
        const kept = es.filter(
          (e) => !(e.target === nodeId && targetInput(spec, e.targetHandle) === input),
        );
        if (!sourceId) return kept;
        return [
          ...kept,
          {
            id: newEdgeId(sourceId, nodeId, input, kept),
            source: sourceId,
            target: nodeId,
            sourceHandle: OUTPUT_HANDLE,
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

  const save = useCallback(async (): Promise<boolean> => {
    const graph = toGraph(nodesRef.current, edgesRef.current, rf.getViewport(), original.current);
    setSaving(true);
    setBanner(null);
    try {
      const saved = unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflow.id } },
          body: { name: name.trim() || workflow.name, graph_json: graph } as never,
        }),
      );
      original.current = saved.graph_json as unknown as GraphJson;
      setProblems(null);
      setDirty(false);
      setBanner({ kind: "ok", text: "Saved." });
      void client.invalidateQueries({ queryKey: keys.workflows });
      return true;
    } catch (exc) {
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
  }, [client, name, rf, workflow.id, workflow.name]);

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
    async (input: Record<string, string> | null) => {
      try {
        await runner.start(
          nodesRef.current.map((n) => n.id),
          input,
        );
        setRunOpen(false);
      } catch (exc) {
        setRunError(exc instanceof Error ? exc.message : String(exc));
      }
    },
    [runner],
  );

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

  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      const mod = event.ctrlKey || event.metaKey;
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
      else if (key === "v") pasteCopy();
      else return;
      event.preventDefault();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [copy, history, pasteCopy, runOpen, save]);

  const displayEdges = useMemo(
    () =>
      edges.map((e) => {
        const messages = problems?.edges.get(e.id);
        return messages ? { ...e, className: "has-problem", label: messages.join("; ") } : e;
      }),
    [edges, problems],
  );
  const context = useMemo(
    () => ({ catalog, live: runner.live, problems }),
    [catalog, runner.live, problems],
  );

  return (
    <EditorContext.Provider value={context}>
      <div className="editor" style={{ flex: 1, minHeight: 0 }}>
        <NodePalette types={types} onAdd={(type) => addNode(type)} />
        <div className="editor-main">
          <EditorToolbar
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
            onFitView={() => void rf.fitView({ padding: 0.2, duration: 200 })}
            run={runner.run}
            onCancel={() => void runner.cancel().catch((e: Error) => setToast(e.message))}
            onRun={() => void openRun()}
          />
          {banner && (
            <div
              className={`banner ${banner.kind}`}
              role={banner.kind === "error" ? "alert" : "status"}
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
              }
            }}
            onDrop={(e) => {
              const type = e.dataTransfer.getData(DRAG_TYPE);
              if (!type) return;
              e.preventDefault();
              addNode(type, rf.screenToFlowPosition({ x: e.clientX, y: e.clientY }));
            }}
          >
            <ReactFlow
              nodes={nodes}
              edges={displayEdges}
              nodeTypes={nodeTypes}
              onNodesChange={handleNodesChange}
              onEdgesChange={handleEdgesChange}
              onConnect={onConnect}
              onConnectEnd={onConnectEnd}
              isValidConnection={isValidConnection}
              onNodeDragStart={() => history.record()}
              defaultViewport={loaded.viewport}
              deleteKeyCode={["Backspace", "Delete"]}
              multiSelectionKeyCode={["Meta", "Control"]}
              minZoom={0.1}
              aria-label="Workflow canvas"
            >
              <Background gap={16} />
              <Controls />
              <MiniMap pannable zoomable ariaLabel="Overview" />
            </ReactFlow>
            {toast && (
              <div className="toast" role="status">
                {toast}
              </div>
            )}
          </div>
        </div>
        <SidePanel
          title={name}
          nodes={nodes}
          edges={edges}
          runError={runner.run?.error ?? null}
          onParam={setParam}
          onConnectInput={connectInput}
          onDelete={(selection) => void rf.deleteElements(selection)}
        />
      </div>
      <RunDialog
        open={runOpen}
        nodes={nodes}
        estimate={estimate}
        error={runError}
        onStart={(input) => void startRun(input)}
        onClose={() => setRunOpen(false)}
      />
    </EditorContext.Provider>
  );
}
