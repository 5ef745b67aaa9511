import { useCallback, useMemo, useState, type RefObject } from "react";
import {
  Background,
  ControlButton,
  Controls,
  MiniMap,
  ReactFlow,
  useReactFlow,
  type FinalConnectionState,
  type NodeTypes,
  type Viewport,
} from "@xyflow/react";
import type { NodeType } from "../api/types";
import { type FlowEdge, type FlowNode } from "../graph/convert";
import { newEdgeId } from "../graph/clipboard";
import { edgeLabel, edgeToNew, refusal, type DraggedFrom } from "../graph/kinds";
import { NOTE_TYPE } from "../graph/note";
import { GROUP_TYPE } from "../graph/group";
import type { Placed } from "../graph/problems";
import { FlowNodeView } from "./FlowNodeView";
import { GroupView } from "./GroupView";
import { NoteView } from "./NoteView";
import { DRAG_TYPE } from "./NodePalette";
import { QuickAdd } from "./QuickAdd";
import type { Graph } from "./useGraph";
import type { GraphEdits } from "./useGraphEdits";

/** "Fit view" leaves the bottom-right corner to the overview (150 × 100 px) and the bottom-left
 * to the zoom controls, so no node is fitted under either. */
export const FIT_PADDING = { top: "40px", left: "70px", right: "190px", bottom: "130px" } as const;

/** The canvas: the graph drawn by React Flow, with what is dropped on it (palette items,
 * media files), the quick-add menu (double-click on the empty canvas, or a connection let go
 * there), the overview and the toast. */
export function EditorCanvas({
  canvas,
  graph,
  edits,
  types,
  baseCatalog,
  catalog,
  problems,
  viewport,
  fit,
  toast,
  notify,
  onDropFiles,
}: {
  /** The element measured for "the middle of the view" (useGraphEdits.addNode). */
  canvas: RefObject<HTMLDivElement | null>;
  graph: Graph;
  edits: GraphEdits;
  types: NodeType[];
  /** The server's node types; ``catalog`` adds the workflow nodes' children. */
  baseCatalog: Map<string, NodeType>;
  catalog: Map<string, NodeType>;
  problems: Placed | null;
  viewport: Viewport;
  fit: boolean;
  toast: string | null;
  notify: (message: string) => void;
  onDropFiles: (files: File[], at: { x: number; y: number }) => void;
}) {
  const { nodes, edges, nodesRef, edgesRef, setEdges, history } = graph;
  const { addNode } = edits;
  const rf = useReactFlow<FlowNode, FlowEdge>();
  const [overview, setOverview] = useState(true);
  const [quickAdd, setQuickAdd] = useState<{
    screen: { x: number; y: number };
    at: { left: number; top: number };
    from: DraggedFrom | null;
  } | null>(null);

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

  const openQuickAdd = useCallback(
    (x: number, y: number, from: DraggedFrom | null) => {
      const box = canvas.current?.getBoundingClientRect();
      if (!box) return;
      // Kept inside the canvas: the menu is about 260 x 320 pixels.
      const left = Math.max(4, Math.min(x - box.left, box.width - 264));
      const top = Math.max(4, Math.min(y - box.top, box.height - 324));
      setQuickAdd({ screen: { x, y }, at: { left, top }, from });
    },
    [canvas],
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
    [addNode, catalog, edgesRef, nodesRef, quickAdd, rf, setEdges],
  );

  const quickAddTypes = useMemo(() => {
    const from = quickAdd?.from;
    if (!from) return types;
    return types.filter(
      (t) => edgeToNew(from, "\u0000new", t.type, nodes, edges, catalog) !== null,
    );
  }, [quickAdd, types, nodes, edges, catalog]);

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
      if (why) notify(`Not connected: ${why}`);
    },
    [catalog, edgesRef, nodesRef, notify, openQuickAdd],
  );

  // Nodes lower on the canvas are drawn above those higher up: a node's output preview grows
  // downwards, so it passes under the nodes below it and never hides their handles.
  const displayNodes = useMemo(() => {
    const order = [...nodes].sort((a, b) => a.position.y - b.position.y).map((n) => n.id);
    const rank = new Map(order.map((id, i) => [id, i + 1]));
    return nodes.map((n) => ({ ...n, zIndex: rank.get(n.id) ?? 0 }));
  }, [nodes]);

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

  return (
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
          onDropFiles([...e.dataTransfer.files], at);
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
        onNodesChange={graph.onNodesChange}
        onEdgesChange={graph.onEdgesChange}
        onConnect={edits.onConnect}
        onConnectEnd={onConnectEnd}
        isValidConnection={edits.isValidConnection}
        onNodeDragStart={() => history.record()}
        onBeforeDelete={edits.onBeforeDelete}
        defaultViewport={viewport}
        fitView={fit}
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
          <MiniMap pannable zoomable ariaLabel="Overview" style={{ width: 150, height: 100 }} />
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
  );
}
