import { useEffect, useState } from "react";
import { Link, useParams } from "react-router";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import { watchRun, type RunEvent } from "../events/runSocket";
import { ArtifactPreview } from "../editor/ArtifactPreview";
import { Status, TRIGGER_LABEL, formatDuration, formatTime } from "../components/Status";

/** One run: its nodes, every artifact with a download link, and its events replayed from
 * the server's log (then live, while it runs). */
export function RunPage() {
  const { workflowId = "", runId = "" } = useParams();
  const [events, setEvents] = useState<RunEvent[]>([]);
  const run = useQuery({
    queryKey: keys.run(workflowId, runId),
    refetchInterval: (query) => (query.state.data?.status === "running" ? 1000 : false),
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/runs/{run_id}", {
          params: { path: { workflow_id: workflowId, run_id: runId } },
        }),
      ),
  });
  useEffect(() => {
    setEvents([]);
    return watchRun(runId, (event) => setEvents((list) => [...list, event]));
  }, [runId]);

  if (run.error)
    return (
      <main className="page narrow">
        <div className="banner error">{run.error.message}</div>
      </main>
    );
  if (!run.data) return <p className="page">Loading…</p>;
  const r = run.data;
  return (
    <main className="page narrow">
      <h1>Run {r.id.slice(0, 8)}</h1>
      <p className="row">
        <Status status={r.status} /> <span>{TRIGGER_LABEL[r.trigger] ?? r.trigger}</span>
        <span>started {formatTime(r.created_at)}</span>
        <span>{formatDuration(r.duration_ms)}</span>
        <span>
          {r.credits_used} credits used of {r.estimated_credits} held
        </span>
        <Link to={`/workflows/${workflowId}`}>Workflow</Link>
        <Link to={`/workflows/${workflowId}/runs`}>All runs of it</Link>
      </p>
      {r.error && (
        <div className="banner error">
          {r.error.code}: {r.error.message}
          {r.error.node_id ? ` (node ${r.error.node_id})` : ""}
        </div>
      )}
      {r.input && (
        <>
          <h2>Input</h2>
          <pre className="card">{JSON.stringify(r.input, null, 2)}</pre>
        </>
      )}
      <h2>Nodes and artifacts</h2>
      <ul className="artifact-list">
        {r.node_runs.map((node) => (
          <li key={node.node_id} className="card">
            <div className="row">
              <b>{node.node_id}</b> <span className="muted">{node.type}</span>
              <Status status={node.status} cached={node.cached} />
              <span className="muted small">
                {formatDuration(node.duration_ms)} · {node.credits_used} credits
              </span>
            </div>
            {node.error && (
              <div className="error-text">
                {String((node.error as { message?: string }).message ?? "")}
              </div>
            )}
            {node.artifact_id && <ArtifactPreview artifactId={node.artifact_id} />}
          </li>
        ))}
      </ul>
      <h2>Events</h2>
      <ol className="small mono" aria-label="Run events">
        {events.map((event) => (
          <li key={event.seq}>
            {event.ts.slice(11, 23)} {event.type}
            {event.node_id ? ` ${event.node_id}` : ""}
            {event.type === "node.progress"
              ? ` ${Math.round(Number(event.data.progress) * 100)}%`
              : ""}
          </li>
        ))}
      </ol>
    </main>
  );
}
