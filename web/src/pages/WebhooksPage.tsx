import { useState } from "react";
import { Link, useParams } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useMe } from "../api/queries";
import type { Webhook } from "../api/types";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { CopyButton, ErrorBanner, NameForm, TableHead, useAction } from "../components/forms";
import { Status, formatTime } from "../components/Status";

const WEBHOOK_PLANS = new Set(["business", "enterprise"]);

/** A workflow's webhook triggers: create, copy URL, switch on/off, delete, recent triggers. */
export function WebhooksPage() {
  const { workflowId = "" } = useParams();
  const me = useMe();
  const workflow = useQuery({
    queryKey: ["workflow-name", workflowId],
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflowId } },
        }),
      ),
  });
  const allowed = me.data ? WEBHOOK_PLANS.has(me.data.plan) : false;
  return (
    <main className="page narrow">
      <h1>Webhooks of “{workflow.data?.name ?? "…"}”</h1>
      <p>
        <Link to={`/workflows/${workflowId}`}>Back to the editor</Link>
      </p>
      <p className="small muted">
        A POST of a JSON object to a webhook’s URL starts a run of this workflow with the body as
        its input data. The URL is the credential: share it only with the system that calls it.
      </p>
      {me.data && !allowed ? (
        <div className="banner warn" role="note">
          Webhooks are not available on the <b>{me.data.plan}</b> plan. They need the Business plan
          or higher
          {me.data.plan === "pro"
            ? " (on Pro they can be managed through the API with an API key)"
            : ""}
          .
        </div>
      ) : me.data ? (
        <WebhookManager workflowId={workflowId} />
      ) : null}
    </main>
  );
}

function WebhookManager({ workflowId }: { workflowId: string }) {
  const client = useQueryClient();
  const [name, setName] = useState("");
  const [active, setActive] = useState(true);
  const [deleting, setDeleting] = useState<Webhook | null>(null);
  const { error, setError, act } = useAction();
  const path = { workflow_id: workflowId };
  const hooks = useQuery({
    queryKey: keys.webhooks(workflowId),
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/workflows/{workflow_id}/webhooks", { params: { path } })),
  });
  const triggers = useQuery({
    queryKey: [...keys.runs(workflowId), "webhook"],
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/runs", {
          params: { path, query: { trigger: "webhook", limit: 20 } },
        }),
      ),
  });
  const refresh = () => client.invalidateQueries({ queryKey: keys.webhooks(workflowId) });

  const create = () =>
    act(async () => {
      unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/webhooks", {
          params: { path },
          body: { name: name.trim() || "webhook", active },
        }),
      );
      setName("");
      await refresh();
    });

  const toggle = (hook: Webhook) =>
    act(async () => {
      unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}/webhooks/{webhook_id}", {
          params: { path: { ...path, webhook_id: hook.id } },
          body: { active: !hook.active },
        }),
      );
      await refresh();
    });

  const remove = (hook: Webhook) => {
    setDeleting(null);
    return act(async () => {
      unwrap(
        await api.DELETE("/api/v1/workflows/{workflow_id}/webhooks/{webhook_id}", {
          params: { path: { ...path, webhook_id: hook.id } },
        }),
      );
      await refresh();
    });
  };

  const names = new Map((hooks.data ?? []).map((h) => [h.id, h.name]));
  return (
    <>
      <ErrorBanner error={error} />
      <NameForm
        id="hook-name"
        label="Webhook name"
        placeholder="from the CMS"
        value={name}
        onChange={setName}
        onSubmit={() => void create()}
        submitLabel="Create webhook"
      >
        <label className="row" style={{ alignSelf: "flex-end", fontWeight: 400 }}>
          <input type="checkbox" checked={active} onChange={(e) => setActive(e.target.checked)} />
          Active
        </label>
      </NameForm>
      <table>
        <TableHead columns={["Name", "URL", "Active", "Created"]} actions />
        <tbody>
          {(hooks.data ?? []).map((hook) => (
            <tr key={hook.id}>
              <td>{hook.name}</td>
              <td className="mono small" style={{ wordBreak: "break-all" }}>
                {hook.url}
              </td>
              <td>
                <label className="row" style={{ fontWeight: 400 }}>
                  <input type="checkbox" checked={hook.active} onChange={() => void toggle(hook)} />
                  <span className="sr-only">Active: {hook.name}</span>
                  {hook.active ? "on" : "off"}
                </label>
              </td>
              <td>{formatTime(hook.created_at)}</td>
              <td>
                <div className="row">
                  <CopyButton text={hook.url} onError={setError} />
                  <button type="button" className="danger" onClick={() => setDeleting(hook)}>
                    Delete
                  </button>
                </div>
              </td>
            </tr>
          ))}
          {hooks.data?.length === 0 && (
            <tr>
              <td colSpan={5} className="muted">
                No webhooks yet.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <h2>Recent triggers</h2>
      {triggers.data?.length ? (
        <table>
          <TableHead columns={["When", "Webhook", "Run"]} />
          <tbody>
            {triggers.data.map((run) => (
              <tr key={run.id}>
                <td>{formatTime(run.created_at)}</td>
                <td>{(run.webhook_id && names.get(run.webhook_id)) ?? "(deleted webhook)"}</td>
                <td>
                  <Link to={`/workflows/${workflowId}/runs/${run.id}`}>
                    <Status status={run.status} />
                  </Link>
                </td>
              </tr>
            ))}
          </tbody>
        </table>
      ) : (
        <p className="muted small">No webhook has started a run of this workflow yet.</p>
      )}
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete webhook “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete"
        onCancel={() => setDeleting(null)}
        onConfirm={() => deleting && void remove(deleting)}
      >
        <p>Its URL stops working at once.</p>
      </ConfirmDialog>
    </>
  );
}
