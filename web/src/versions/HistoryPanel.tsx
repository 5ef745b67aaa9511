import { shownName } from "../graph/label";
import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { GraphJson, WorkflowVersion, WorkflowVersionSummary } from "../api/types";
import { diffGraphs, onlyLayout, showValue, type GraphDiff } from "./diff";

function useVersion(workflowId: string, version: number | null) {
  return useQuery({
    queryKey: keys.version(workflowId, version ?? 0),
    enabled: version !== null,
    staleTime: Infinity, // a version never changes
    queryFn: async (): Promise<WorkflowVersion> =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/versions/{version}", {
          params: { path: { workflow_id: workflowId, version: version ?? 0 } },
        }),
      ),
  });
}

function author(v: WorkflowVersionSummary): string {
  const by = v.created_by;
  const who = by.email ?? "unknown";
  if (by.via === "api_key") return `${who} · key ${by.api_key_name ?? "(revoked)"}`;
  if (by.via === "jwt") return `${who} · web`;
  return who;
}

function when(ts: string): string {
  return new Date(ts).toLocaleString();
}

/** The editor's History panel: every saved version, newest first; pick one to see what
 * changed against another (the one before it by default), and restore it. */
export function HistoryPanel({
  workflowId,
  current,
  restoring,
  onRestore,
  onClose,
}: {
  workflowId: string;
  /** The version the editor holds. */
  current: number;
  restoring: boolean;
  onRestore: (version: number) => void;
  onClose: () => void;
}) {
  const versions = useQuery({
    queryKey: [...keys.versions(workflowId), current],
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/versions", {
          params: { path: { workflow_id: workflowId }, query: { limit: 200 } },
        }),
      ),
  });
  const [picked, setPicked] = useState<number | null>(null);
  const [against, setAgainst] = useState<number | null>(null);
  const list = versions.data ?? [];
  const selected = picked ?? list[0]?.version ?? null;
  const base = against ?? (selected !== null && selected > 1 ? selected - 1 : null);
  const after = useVersion(workflowId, selected);
  const before = useVersion(workflowId, base);
  let diff: GraphDiff | null = null;
  if (after.data && (base === null || before.data)) {
    const empty: GraphJson = { nodes: [], edges: [], viewport: { x: 0, y: 0, zoom: 1 } };
    const old = before.data;
    diff = diffGraphs(
      (old?.graph_json as unknown as GraphJson | undefined) ?? empty,
      after.data.graph_json as unknown as GraphJson,
      old ? { before: old.name, after: after.data.name } : undefined,
    );
  }
  return (
    <aside className="sidepanel history" id="editor-details" aria-label="History">
      <div className="row">
        <h2 style={{ margin: 0 }}>History</h2>
        <span className="spacer" />
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
      {versions.error && <div className="banner error">{versions.error.message}</div>}
      {versions.isPending && <p className="muted small">Loading…</p>}
      <ol className="versions" aria-label="Versions">
        {list.map((v) => (
          <li key={v.version}>
            <button
              type="button"
              className={v.version === selected ? "version selected" : "version"}
              aria-pressed={v.version === selected}
              onClick={() => {
                setPicked(v.version);
                setAgainst(null);
              }}
            >
              <b>Version {v.version}</b>
              {v.version === current && <span className="muted"> (current)</span>}
              <span className="small muted block">
                {when(v.created_at)} · {author(v)}
              </span>
              {(v.message || v.restored_from) && (
                <span className="small block">
                  {v.message ?? `Restored version ${v.restored_from}`}
                </span>
              )}
            </button>
          </li>
        ))}
      </ol>
      {selected !== null && (
        <section aria-label={`Version ${selected}`} data-testid="version-diff">
          <div className="field">
            <label htmlFor="diff-against">Changes in version {selected} compared with</label>
            <select
              id="diff-against"
              value={base ?? ""}
              onChange={(e) => setAgainst(e.target.value ? Number(e.target.value) : null)}
            >
              <option value="">nothing (an empty workflow)</option>
              {list
                .filter((v) => v.version !== selected)
                .map((v) => (
                  <option key={v.version} value={v.version}>
                    version {v.version}
                    {v.version === current ? " (current)" : ""}
                  </option>
                ))}
            </select>
          </div>
          {diff ? <DiffView diff={diff} /> : <p className="muted small">Loading…</p>}
          {selected !== current && (
            <button
              type="button"
              className="primary"
              disabled={restoring}
              onClick={() => onRestore(selected)}
            >
              Restore version {selected}
            </button>
          )}
        </section>
      )}
    </aside>
  );
}

function DiffView({ diff }: { diff: GraphDiff }) {
  if (onlyLayout(diff) && !diff.changed.length) {
    return <p className="small muted">No changes.</p>;
  }
  return (
    <ul className="diff small">
      {diff.name && (
        <li>
          Renamed “{diff.name.before}” → “{diff.name.after}”
        </li>
      )}
      {diff.added.map((n) => (
        <li key={`+${n.id}`} className="added">
          + node {shownName(n)} ({n.type})
        </li>
      ))}
      {diff.removed.map((n) => (
        <li key={`-${n.id}`} className="removed">
          − node {shownName(n)} ({n.type})
        </li>
      ))}
      {diff.changed.map((c) => (
        <li key={`~${c.id}`}>
          ~ node {c.renamed?.after ?? c.renamed?.before ?? c.id} ({c.type})
          {c.typeBefore && <span> type was {c.typeBefore}</span>}
          {c.renamed && (
            <span>
              {" "}
              renamed {c.renamed.before ? `“${c.renamed.before}”` : c.id} →{" "}
              {c.renamed.after ? `“${c.renamed.after}”` : c.id}
            </span>
          )}
          {c.moved && !c.params.length && !c.typeBefore && !c.renamed && (
            <span className="muted"> moved</span>
          )}
          {c.params.length > 0 && (
            <ul>
              {c.params.map((p) => (
                <li key={p.name}>
                  {p.name}: <span className="removed">{showValue(p.before)}</span> →{" "}
                  <span className="added">{showValue(p.after)}</span>
                </li>
              ))}
            </ul>
          )}
        </li>
      ))}
      {diff.edgesAdded.map((e) => (
        <li key={`+e${e.id}`} className="added">
          + connection {e.source} → {e.target}
          {e.targetHandle ? ` (${e.targetHandle})` : ""}
        </li>
      ))}
      {diff.edgesRemoved.map((e) => (
        <li key={`-e${e.id}`} className="removed">
          − connection {e.source} → {e.target}
          {e.targetHandle ? ` (${e.targetHandle})` : ""}
        </li>
      ))}
    </ul>
  );
}
