import { useEffect, useMemo, useRef, useState } from "react";
import { Link, useLocation, useParams } from "react-router";
import { useQuery } from "@tanstack/react-query";
import { ReactFlowProvider, useReactFlow } from "@xyflow/react";
import { api, unwrap } from "../api/client";
import { catalogMap, keys, useChildCatalog, useNodeTypes } from "../api/queries";
import type { GraphJson, NodeType, Warning, Workflow } from "../api/types";
import { fromGraph, type FlowEdge, type FlowNode } from "../graph/convert";
import { isGroup } from "../graph/group";
import { repeatBounds } from "../graph/repeat";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { EditorContext } from "../editor/context";
import { EditorCanvas, FIT_PADDING } from "../editor/EditorCanvas";
import { EditorToolbar } from "../editor/EditorToolbar";
import { LeaveDialog } from "../editor/LeaveDialog";
import { NodePalette } from "../editor/NodePalette";
import { PublishDialog } from "../editor/PublishDialog";
import { RunDialog } from "../editor/RunDialog";
import { SaveBanners } from "../editor/SaveBanners";
import { ShortcutSheet } from "../editor/ShortcutSheet";
import { SidePanel } from "../editor/SidePanel";
import { useClipboard } from "../editor/useClipboard";
import { useDrawer } from "../editor/useDrawer";
import { useGraph } from "../editor/useGraph";
import { useGraphEdits } from "../editor/useGraphEdits";
import { useLiveRun } from "../editor/useLiveRun";
import { useRefusedHandles } from "../editor/useRefusedHandles";
import { useSave } from "../editor/useSave";
import { useShortcuts } from "../editor/useShortcuts";
import { useToast } from "../editor/useToast";
import { useUnsavedGuard } from "../editor/useUnsavedGuard";
import { HistoryPanel } from "../versions/HistoryPanel";

/** What the workflows page passes when it opens a workflow it just made (import, template):
 * fit the graph into view, and show the warnings the create answered with. */
export interface OpenState {
  fit?: boolean;
  warnings?: Warning[];
}

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

/** The editor of one version of a workflow: it wires the graph (useGraph), its edits, saving
 * and versions (useSave), running (useLiveRun) and the keyboard to the panels around the
 * canvas. */
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
  const baseCatalog = useMemo(() => catalogMap(types), [types]);
  const [loaded] = useState(() => fromGraph(workflow.graph_json as unknown as GraphJson));
  const location = useLocation();
  const [opened] = useState(() => {
    const state = (location.state ?? {}) as OpenState;
    // The warnings the create answered with, else those the server reports for the graph as
    // stored now (a credential deleted since, a provider no longer configured).
    return state.warnings?.length
      ? { fit: state.fit, warnings: state.warnings, fromServer: false }
      : { fit: state.fit, warnings: workflow.warnings ?? [], fromServer: true };
  });
  // What the banner says on opening; the note is said once, so it is dropped once taken.
  const [opening] = useState(() => ({
    note,
    warnings: opened.warnings,
    fromServer: opened.fromServer,
  }));
  useEffect(() => {
    if (note) onNote(null);
  }, [note, onNote]);
  const graph = useGraph(loaded);
  const { nodes, edges, dirty, setDirty, history } = graph;
  // Workflow nodes are drawn and checked with their child's inputs and output.
  const catalog = useChildCatalog(baseCatalog, nodes);
  const [toast, notify] = useToast();
  const canvas = useRef<HTMLDivElement>(null);
  const rf = useReactFlow<FlowNode, FlowEdge>();
  const edits = useGraphEdits(graph, catalog, canvas, notify);
  const clip = useClipboard(graph, edits.addNode, catalog, notify);
  const [name, setName] = useState(workflow.name);
  const saver = useSave({
    workflow,
    graph,
    name,
    original: loaded.original,
    opening,
    onNote,
  });
  const { save, saving, version } = saver;
  const runs = useLiveRun({ workflow, loaded, graph, saver, notify });
  const [drawer, setDrawer] = useDrawer();
  const [publishOpen, setPublishOpen] = useState(false);
  const [historyOpen, setHistoryOpen] = useState(false);
  const [confirmRestore, setConfirmRestore] = useState<number | null>(null);
  const [shortcutsOpen, setShortcutsOpen] = useState(false);
  const blocker = useUnsavedGuard(dirty);

  useShortcuts({
    paused: runs.dialogOpen,
    save: () => void save(),
    undo: history.undo,
    redo: history.redo,
    copy: clip.copy,
    group: edits.groupSelection,
    ungroup: edits.ungroupSelection,
    showShortcuts: () => setShortcutsOpen(true),
    pasteCopy: clip.pasteCopy,
    pasteFiles: (files) => void clip.addMediaNodes(files),
    pasteText: clip.importComfy,
  });

  const refused = useRefusedHandles(nodes, edges, catalog);
  const repeats = useMemo(() => repeatBounds({ nodes, edges }), [nodes, edges]);
  const { problems, warnings } = saver;
  const { live, stale } = runs;
  const { rename, editNote, ungroup } = edits;
  const context = useMemo(
    () => ({
      catalog,
      live,
      problems,
      warnings,
      refused,
      stale,
      repeats,
      rename,
      editNote,
      ungroup,
    }),
    [catalog, live, problems, warnings, refused, stale, repeats, rename, editNote, ungroup],
  );

  const restoreVersion = (n: number) => {
    setConfirmRestore(null);
    void saver.restoreVersion(n);
  };

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
            edits.addNode(type);
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
            onGroup={edits.groupSelection}
            canGroup={nodes.some((n) => n.selected && !isGroup(n))}
            run={runs.run}
            onCancel={() => void runs.cancel().catch((e: Error) => notify(e.message))}
            onRun={() => void runs.openDialog()}
            onRunAgain={(cache) => void runs.runAgain(cache)}
            onRetryCurrent={() => void runs.retryCurrent()}
            cachedCount={runs.cachedCount}
            version={version}
            historyOpen={historyOpen}
            onHistory={() => {
              setHistoryOpen(!historyOpen);
              setDrawer(historyOpen ? null : "details");
            }}
            onPublish={() => setPublishOpen(true)}
          />
          <SaveBanners
            conflict={saver.conflict}
            banner={saver.banner}
            dirty={dirty}
            onReload={() => void saver.reload()}
          />
          <EditorCanvas
            canvas={canvas}
            graph={graph}
            edits={edits}
            types={types}
            baseCatalog={baseCatalog}
            catalog={catalog}
            problems={problems}
            viewport={loaded.viewport}
            fit={opened.fit === true}
            toast={toast}
            notify={notify}
            onDropFiles={(files, at) => void clip.addMediaNodes(files, at)}
          />
        </div>
        {historyOpen ? (
          <HistoryPanel
            workflowId={workflow.id}
            current={version}
            restoring={saver.restoring}
            onRestore={(n) => (dirty ? setConfirmRestore(n) : restoreVersion(n))}
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
            runError={runs.run?.error ?? null}
            onParam={edits.setParam}
            onConnectInput={edits.connectInput}
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
        onConfirm={() => confirmRestore !== null && restoreVersion(confirmRestore)}
        onCancel={() => setConfirmRestore(null)}
      >
        <p>The changes not saved here are dropped; the restored version opens in the editor.</p>
      </ConfirmDialog>
      <RunDialog
        open={runs.dialogOpen}
        nodes={nodes}
        estimate={runs.estimate}
        error={runs.error}
        onStart={(input, cache) => void runs.start(input, cache)}
        onClose={runs.closeDialog}
      />
      <PublishDialog
        open={publishOpen}
        onClose={() => setPublishOpen(false)}
        workflowId={workflow.id}
        workflowName={name}
        version={version}
        dirty={dirty}
        nodes={nodes}
        edges={edges}
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
