import { Link } from "react-router";
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import { CopyButton, ErrorBanner, TableHead, useAction } from "../components/forms";
import { formatTime } from "../components/Status";

const ACCESS_LABEL = { private: "Private", link: "Link", public: "Public" } as const;

/** The account's apps: their links, state, pinned version and what they spent. Each is
 * changed from its workflow's editor ("Publish as app"). */
export function AppsPage() {
  const { error, setError } = useAction();
  const apps = useQuery({
    queryKey: keys.apps(),
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/apps", { params: { query: { limit: 200 } } })),
  });
  return (
    <main className="page">
      <h1>Apps</h1>
      <p className="small muted">
        Workflows published as pages other people use without an account; their runs are charged to
        you. Publish one from a workflow’s editor (“Publish as app”), and change it there. Apps
        whose access is public are listed for anyone in the <a href="/gallery">gallery</a>.
      </p>
      <ErrorBanner error={error ?? (apps.error ? apps.error.message : null)} />
      {apps.data && apps.data.length === 0 && <p>No apps yet.</p>}
      {apps.data && apps.data.length > 0 && (
        <table data-testid="apps-table">
          <TableHead
            columns={["App", "Link", "Access", "Version", "Spent today", "Spent in all", "Updated"]}
            actions
          />
          <tbody>
            {apps.data.map((app) => (
              <tr key={app.id}>
                <td>
                  {app.title}
                  {!app.published && <span className="muted small"> (unpublished)</span>}
                </td>
                <td className="mono small" style={{ wordBreak: "break-all" }}>
                  <a href={app.url} target="_blank" rel="noreferrer">
                    {app.url}
                  </a>{" "}
                  <CopyButton text={app.url} onError={setError} />
                </td>
                <td>
                  {ACCESS_LABEL[app.access]}
                  {app.has_password ? ", password" : ""}
                </td>
                <td>{app.workflow_version}</td>
                <td>
                  {app.spent_today}
                  {app.budget_daily != null ? ` of ${app.budget_daily}` : ""}
                </td>
                <td>
                  {app.spent_total}
                  {app.budget_total != null ? ` of ${app.budget_total}` : ""}
                </td>
                <td className="small">{formatTime(app.updated_at)}</td>
                <td>
                  <Link to={`/workflows/${app.workflow_id}`}>Workflow</Link>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}
