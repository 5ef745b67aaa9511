import { Link, useParams, useSearchParams } from "react-router";
import { useQuery } from "@tanstack/react-query";
import { ApiError, api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { RunListItem, RunStatus, RunSummary } from "../api/types";
import { shownRunStatus } from "../events/runEvents";
import { Status, TRIGGER_LABEL, formatDuration, formatTime } from "../components/Status";

const STATUSES: RunStatus[] = ["running", "completed", "failed", "cancelled"];

/** Runs, newest first: of one workflow (/workflows/:id/runs) or of every workflow (/runs),
 * optionally of one status (?status=, kept in the URL). */
export function RunsPage() {
  const { workflowId } = useParams();
  const [search, setSearch] = useSearchParams();
  const wanted = search.get("status");
  const status = STATUSES.find((s) => s === wanted);
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
    queryKey: [...keys.runs(workflowId), status ?? "any"],
    refetchInterval: (query) =>
      (query.state.data as RunSummary[] | undefined)?.some((r) => r.status === "running")
        ? 2000
        : false,
    queryFn: async (): Promise<(RunSummary | RunListItem)[]> => {
      const list = async (asked: RunStatus | undefined) => {
        // "cancelled" is a RunStatus here before the generated query type may list it.
        const query = { limit: 100, ...(asked ? { status: asked as never } : {}) };
        return workflowId
          ? unwrap(
              await api.GET("/api/v1/workflows/{workflow_id}/runs", {
                params: { path: { workflow_id: workflowId }, query },
              }),
            )
          : unwrap(await api.GET("/api/v1/runs", { params: { query } }));
      };
      let found: (RunSummary | RunListItem)[];
      try {
        found = await list(status);
      } catch (exc) {
        // A server without the cancelled status refuses the filter: its cancelled runs are
        // failed runs with the error code "cancelled".
        if (!(status === "cancelled" && exc instanceof ApiError && exc.status === 400)) throw exc;
        found = await list("failed");
      }
      return status ? found.filter((r) => shownRunStatus(r) === status) : found;
    },
  });
  return (
    <main className="page narrow">
      <h1>{workflowId ? `Runs of “${workflow.data?.name ?? "…"}”` : "All runs"}</h1>
      {workflowId && (
        <p>
          <Link to={`/workflows/${workflowId}`}>Open in the editor</Link>
        </p>
      )}
      <div className="field" style={{ maxWidth: 220 }}>
        <label htmlFor="run-status-filter">Status</label>
        <select
          id="run-status-filter"
          value={status ?? ""}
          onChange={(e) => setSearch(e.target.value ? { status: e.target.value } : {})}
        >
          <option value="">Any status</option>
          {STATUSES.map((s) => (
            <option key={s} value={s}>
              {s[0]?.toUpperCase() + s.slice(1)}
            </option>
          ))}
        </select>
      </div>
      {runs.error && <div className="banner error">{runs.error.message}</div>}
      {runs.data && runs.data.length === 0 && (
        <p className="muted">{status ? `No ${status} runs.` : "No runs yet."}</p>
      )}
      {runs.data && runs.data.length > 0 && (
        <div className="table-scroll">
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
                    <Status status={shownRunStatus(run)} />
                    {run.error && shownRunStatus(run) !== "cancelled" && (
                      <span className="muted small"> {run.error.code}</span>
                    )}
                  </td>
                  <td>
                    {TRIGGER_LABEL[run.trigger] ?? run.trigger}
                    {run.retried_from && <span className="muted small"> · retry</span>}
                  </td>
                  <td>
                    {run.credits_used} / {run.estimated_credits}
                  </td>
                  <td>{formatDuration(run.duration_ms)}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </main>
  );
}
