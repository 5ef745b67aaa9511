import { useState } from "react";
import { Link, useParams } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useMe } from "../api/queries";
import type { Schedule } from "../api/types";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBanner, TableHead, useAction } from "../components/forms";
import { formatTime } from "../components/Status";
import { parseScheduleInput, type ScheduleDraft } from "./scheduleDraft";

const TRIGGER_PLANS = new Set(["business", "enterprise"]);

function localZone(): string {
  return Intl.DateTimeFormat().resolvedOptions().timeZone || "UTC";
}

function emptyDraft(): ScheduleDraft {
  return {
    name: "",
    cron: "0 9 * * *",
    timezone: localZone(),
    input: "",
    callbackUrl: "",
    active: true,
  };
}

/** A workflow's schedules: add, edit, pause/resume, delete; each shows when it fires next. */
export function SchedulesPage() {
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
  const allowed = me.data ? TRIGGER_PLANS.has(me.data.plan) : false;
  return (
    <main className="page narrow">
      <h1>Schedules of “{workflow.data?.name ?? "…"}”</h1>
      <p>
        <Link to={`/workflows/${workflowId}`}>Back to the editor</Link>
      </p>
      <p className="small muted">
        A schedule runs this workflow at the times a cron expression names, on the wall clock of a
        time zone (daylight-saving time included), with the input given here. A time missed while
        the server was down runs once when it is back.
      </p>
      {me.data && !allowed ? (
        <div className="banner warn" role="note">
          Schedules are not available on the <b>{me.data.plan}</b> plan. They need the Business plan
          or higher
          {me.data.plan === "pro"
            ? " (on Pro they can be managed through the API with an API key)"
            : ""}
          .
        </div>
      ) : me.data ? (
        <ScheduleManager workflowId={workflowId} />
      ) : null}
    </main>
  );
}

function ScheduleManager({ workflowId }: { workflowId: string }) {
  const client = useQueryClient();
  const [draft, setDraft] = useState<ScheduleDraft>(emptyDraft);
  const [editing, setEditing] = useState<string | null>(null);
  const [deleting, setDeleting] = useState<Schedule | null>(null);
  const { error, setError, act } = useAction();
  const path = { workflow_id: workflowId };
  const schedules = useQuery({
    queryKey: keys.schedules(workflowId),
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/workflows/{workflow_id}/schedules", { params: { path } })),
    refetchInterval: 15_000, // next_run_at and the last firing move on by themselves
  });
  const refresh = () => client.invalidateQueries({ queryKey: keys.schedules(workflowId) });

  const save = () =>
    act(async () => {
      const input = parseScheduleInput(draft.input);
      if (typeof input === "string") {
        setError(input);
        return;
      }
      const body = {
        name: draft.name.trim() || "schedule",
        cron: draft.cron.trim(),
        timezone: draft.timezone.trim() || "UTC",
        input,
        callback_url: draft.callbackUrl.trim() || null,
        active: draft.active,
      };
      if (editing) {
        unwrap(
          await api.PATCH("/api/v1/workflows/{workflow_id}/schedules/{schedule_id}", {
            params: { path: { ...path, schedule_id: editing } },
            body,
          }),
        );
      } else {
        unwrap(
          await api.POST("/api/v1/workflows/{workflow_id}/schedules", { params: { path }, body }),
        );
      }
      setDraft(emptyDraft());
      setEditing(null);
      await refresh();
    });

  const edit = (s: Schedule) => {
    setEditing(s.id);
    setDraft({
      name: s.name,
      cron: s.cron,
      timezone: s.timezone,
      input: s.input ? JSON.stringify(s.input) : "",
      callbackUrl: s.callback_url ?? "",
      active: s.active,
    });
  };

  const toggle = (s: Schedule) =>
    act(async () => {
      unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}/schedules/{schedule_id}", {
          params: { path: { ...path, schedule_id: s.id } },
          body: { active: !s.active },
        }),
      );
      await refresh();
    });

  const remove = (s: Schedule) => {
    setDeleting(null);
    return act(async () => {
      unwrap(
        await api.DELETE("/api/v1/workflows/{workflow_id}/schedules/{schedule_id}", {
          params: { path: { ...path, schedule_id: s.id } },
        }),
      );
      await refresh();
    });
  };

  const set = (field: keyof ScheduleDraft) => (e: React.ChangeEvent<HTMLInputElement>) =>
    setDraft({ ...draft, [field]: field === "active" ? e.target.checked : e.target.value });

  return (
    <>
      <ErrorBanner error={error} />
      <form
        className="card schedule-form"
        aria-label={editing ? "Edit schedule" : "Add a schedule"}
        onSubmit={(e) => {
          e.preventDefault();
          void save();
        }}
      >
        <div className="row">
          <label>
            Name
            <input value={draft.name} onChange={set("name")} placeholder="mornings" />
          </label>
          <label>
            Cron expression
            <input
              className="mono"
              value={draft.cron}
              onChange={set("cron")}
              placeholder="0 9 * * 1-5"
              required
            />
          </label>
          <label>
            Time zone
            <input value={draft.timezone} onChange={set("timezone")} placeholder="Europe/Berlin" />
          </label>
        </div>
        <label>
          Input (JSON object, optional)
          <input
            className="mono"
            value={draft.input}
            onChange={set("input")}
            placeholder='{"text": "today"}'
          />
        </label>
        <label>
          Callback URL (optional: each run POSTs its record here, signed, when it ends)
          <input
            type="url"
            value={draft.callbackUrl}
            onChange={set("callbackUrl")}
            placeholder="https://hooks.example.com/nodeloom"
          />
        </label>
        <div className="row">
          <label className="row" style={{ fontWeight: 400 }}>
            <input type="checkbox" checked={draft.active} onChange={set("active")} />
            Active
          </label>
          <button type="submit" className="primary">
            {editing ? "Save schedule" : "Add schedule"}
          </button>
          {editing && (
            <button
              type="button"
              onClick={() => {
                setEditing(null);
                setDraft(emptyDraft());
              }}
            >
              Cancel
            </button>
          )}
        </div>
        <p className="small muted">
          Five fields: minute hour day-of-month month day-of-week (<code>0 9 * * 1-5</code>: 09:00
          on weekdays).
        </p>
      </form>
      <table>
        <TableHead
          columns={["Name", "Cron", "Time zone", "Next run", "Last firing", "Active"]}
          actions
        />
        <tbody>
          {(schedules.data ?? []).map((s) => (
            <tr key={s.id}>
              <td>{s.name}</td>
              <td className="mono small">{s.cron}</td>
              <td>{s.timezone}</td>
              <td data-testid="next-run">{s.next_run_at ? formatTime(s.next_run_at) : "paused"}</td>
              <td className="small">
                {s.last_error ? (
                  <span className="error-text" title={s.last_error.message}>
                    no run: {s.last_error.code}
                  </span>
                ) : s.last_run_id ? (
                  <Link to={`/workflows/${workflowId}/runs/${s.last_run_id}`}>
                    {formatTime(s.last_fired_at)}
                  </Link>
                ) : (
                  "—"
                )}
              </td>
              <td>
                <label className="row" style={{ fontWeight: 400 }}>
                  <input type="checkbox" checked={s.active} onChange={() => void toggle(s)} />
                  <span className="sr-only">Active: {s.name}</span>
                  {s.active ? "on" : "paused"}
                </label>
              </td>
              <td>
                <div className="row">
                  <button type="button" onClick={() => edit(s)}>
                    Edit
                  </button>
                  <button type="button" className="danger" onClick={() => setDeleting(s)}>
                    Delete
                  </button>
                </div>
              </td>
            </tr>
          ))}
          {schedules.data?.length === 0 && (
            <tr>
              <td colSpan={7} className="muted">
                No schedules yet.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete schedule “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete"
        onCancel={() => setDeleting(null)}
        onConfirm={() => deleting && void remove(deleting)}
      >
        <p>It never fires again. The runs it started stay.</p>
      </ConfirmDialog>
    </>
  );
}
