import { Link, useParams } from "react-router";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { RunListItem, RunSummary } from "../api/types";
import { Status, TRIGGER_LABEL, formatDuration, formatTime } from "../components/Status";

/** Runs, newest first: of one workflow (/workflows/:id/runs) or of every workflow (/runs). */
export function RunsPage() {
  const { workflowId } = useParams();
  const workflow = useQuery({
    queryKey: ["workflow-name", workflowId],
    enabled: Boolean(workflowId),
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflowId as string } },
        }),
      ),
  });
  const runs = useQuery({
    queryKey: keys.runs(workflowId),
    refetchInterval: (query) =>
      (query.state.data as RunSummary[] | undefined)?.some((r) => r.status === "running")
        ? 2000
        : false,
    queryFn: async (): Promise<(RunSummary | RunListItem)[]> =>
      workflowId
        ? unwrap(
            await api.GET("/api/v1/workflows/{workflow_id}/runs", {
              params: { path: { workflow_id: workflowId }, query: { limit: 100 } },
            }),
          )
        : unwrap(await api.GET("/api/v1/runs", { params: { query: { limit: 100 } } })),
  });
  return (
    <main className="page narrow">
      <h1>{workflowId ? `Runs of “${workflow.data?.name ?? "…"}”` : "All runs"}</h1>
      {workflowId && (
        <p>
          <Link to={`/workflows/${workflowId}`}>Open in the editor</Link>
        </p>
      )}
      {runs.error && <div className="banner error">{runs.error.message}</div>}
      {runs.data && runs.data.length === 0 && <p className="muted">No runs yet.</p>}
      {runs.data && runs.data.length > 0 && (
        <table>
          <thead>
            <tr>
              <th>Started</th>
              {!workflowId && <th>Workflow</th>}
              <th>Status</th>
              <th>Trigger</th>
              <th>Credits</th>
              <th>Duration</th>
            </tr>
          </thead>
          <tbody>
            {runs.data.map((run) => (
              <tr key={run.id}>
                <td>
                  <Link to={`/workflows/${run.workflow_id}/runs/${run.id}`}>
                    {formatTime(run.created_at)}
                  </Link>
                </td>
                {!workflowId && <td>{"workflow_name" in run ? run.workflow_name : ""}</td>}
                <td>
                  <Status status={run.status} />
                  {run.error && <span className="muted small"> {run.error.code}</span>}
                </td>
                <td>{TRIGGER_LABEL[run.trigger] ?? run.trigger}</td>
                <td>
                  {run.credits_used} / {run.estimated_credits}
                </td>
                <td>{formatDuration(run.duration_ms)}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}
