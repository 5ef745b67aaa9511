import { Link } from "react-router";
import { CACHED_NOTE, Status } from "../components/Status";
import type { RunView } from "./useRun";

/** Name, save, undo/redo, fit view, the current run and its controls; on a narrow screen
 * also the buttons that open the palette and the side panel as drawers. */
export function EditorToolbar({
  drawer,
  onDrawer,
  workflowId,
  name,
  onName,
  dirty,
  saving,
  onSave,
  history,
  onFitView,
  onGroup,
  canGroup,
  run,
  onCancel,
  onRun,
  onRunAgain,
  onRetryCurrent,
  cachedCount,
  version,
  historyOpen,
  onHistory,
  onPublish,
}: {
  drawer: "palette" | "details" | null;
  onDrawer: (which: "palette" | "details" | null) => void;
  workflowId: string;
  name: string;
  onName: (value: string) => void;
  dirty: boolean;
  saving: boolean;
  onSave: () => void;
  history: { undo: () => void; redo: () => void; canUndo: boolean; canRedo: boolean };
  onFitView: () => void;
  /** Frame the selected nodes in a new group (Ctrl+G). */
  onGroup: () => void;
  canGroup: boolean;
  run: RunView | null;
  onCancel: () => void;
  onRun: () => void;
  onRunAgain: (cache: boolean) => void;
  /** Retry the shown failed or cancelled run with the workflow as saved now. */
  onRetryCurrent: () => void;
  /** How many nodes of the shown run were cached. */
  cachedCount: number;
  /** The saved version the editor holds. */
  version: number;
  historyOpen: boolean;
  onHistory: () => void;
  /** Open the "Publish as app" dialog. */
  onPublish: () => void;
}) {
  const running = run?.status === "running";
  const retryable = run?.status === "failed" || run?.status === "cancelled";
  // Every control is always there (disabled when it does not apply) and the run's state has a
  // slot of its own after the run buttons, wide enough for it, so starting or finishing a run
  // does not move a button or add a row. The groups name the controls for assistive
  // technology; the controls wrap as one row of items.
  return (
    <div className="toolbar" role="toolbar" aria-label="Editor">
      <div className="toolbar-group">
        <button
          type="button"
          className="drawer-toggle"
          aria-expanded={drawer === "palette"}
          aria-controls="editor-palette"
          onClick={() => onDrawer(drawer === "palette" ? null : "palette")}
        >
          Nodes
        </button>
        <button
          type="button"
          className="drawer-toggle"
          aria-expanded={drawer === "details"}
          aria-controls="editor-details"
          onClick={() => onDrawer(drawer === "details" ? null : "details")}
        >
          Details
        </button>
        <input
          className="name"
          aria-label="Workflow name"
          value={name}
          onChange={(e) => onName(e.target.value)}
        />
        <button type="button" className={dirty ? "primary" : ""} onClick={onSave} disabled={saving}>
          Save
        </button>
        <button type="button" onClick={history.undo} disabled={!history.canUndo} title="Ctrl+Z">
          Undo
        </button>
        <button
          type="button"
          onClick={history.redo}
          disabled={!history.canRedo}
          title="Ctrl+Shift+Z"
        >
          Redo
        </button>
        <button type="button" onClick={onFitView}>
          Fit view
        </button>
        <button type="button" onClick={onGroup} disabled={!canGroup} title="Group (Ctrl+G)">
          Group
        </button>
        <span className="muted small save-state" data-testid="save-state">
          {dirty ? "Unsaved changes" : "All changes saved"} · version {version}
        </span>
        <button type="button" aria-pressed={historyOpen} onClick={onHistory}>
          History
        </button>
      </div>
      <span className="spacer" />
      <div className="toolbar-group" role="group" aria-label="Run">
        {running ? (
          <button type="button" className="danger" onClick={onCancel}>
            Cancel run
          </button>
        ) : (
          <button type="button" className="primary" onClick={onRun} disabled={saving}>
            Run
          </button>
        )}
        <button
          type="button"
          onClick={() => onRunAgain(true)}
          disabled={!run || running || saving}
          title="The last run's input, no dialog"
        >
          Run again
        </button>
        <button
          type="button"
          onClick={() => onRunAgain(false)}
          disabled={!run || running || saving}
          title="The last run's input; every node computed and charged again"
        >
          Run without cache
        </button>
        <button
          type="button"
          onClick={onRetryCurrent}
          disabled={!retryable || saving}
          title={
            retryable
              ? "Save, then retry this run with the workflow as it is now: nodes unchanged since the run are reused (no credits), the rest run again"
              : "For a failed or cancelled run"
          }
        >
          Retry with this version
        </button>
        <span
          className="run-state small"
          aria-live="polite"
          data-testid="run-state"
          title={
            run
              ? `Run ${run.status}${run.creditsUsed !== undefined ? `, ${run.creditsUsed} credits` : ""}${
                  cachedCount > 0 ? `, ${cachedCount} cached` : ""
                }`
              : undefined
          }
        >
          {run ? (
            <>
              Run <Status status={run.status} />
              {run.creditsUsed !== undefined && (
                <span>
                  {run.creditsUsed} credits
                  {cachedCount > 0 && (
                    <span className="muted" title={CACHED_NOTE}>
                      {" "}
                      · {cachedCount} node{cachedCount === 1 ? "" : "s"} cached
                    </span>
                  )}
                </span>
              )}
              <Link to={`/workflows/${workflowId}/runs/${run.runId}`}>Run page</Link>
            </>
          ) : (
            <span className="muted">Not run yet</span>
          )}
        </span>
      </div>
      <div className="toolbar-group">
        <Link className="button" to={`/workflows/${workflowId}/runs`}>
          Runs
        </Link>
        <Link className="button" to={`/workflows/${workflowId}/webhooks`}>
          Webhooks
        </Link>
        <Link className="button" to={`/workflows/${workflowId}/schedules`}>
          Schedules
        </Link>
        <button type="button" onClick={onPublish}>
          Publish as app
        </button>
      </div>
    </div>
  );
}
