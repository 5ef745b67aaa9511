import { useEffect, useRef, useState } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useAssets } from "../api/queries";
import { useModal } from "../components/useModal";
import { CopyButton, messageOf } from "../components/forms";
import {
  createBody,
  draftFromApp,
  embedSnippet,
  newDraft,
  updateBody,
  type AppDraft,
  type AppRecord,
  type DraftProblem,
  type GraphEdgeLike,
  type GraphNodeLike,
} from "../apps/publish";
import { AppFormFields } from "./AppFormFields";

/** "Publish as app": the workflow's apps (a new one, or one already published) as a form —
 * title, cover, the fields and outputs shown, access, limits, embedding — and, once
 * published, its link, with update, unpublish, delete and "move to the newest version". */
export function PublishDialog({
  open,
  onClose,
  workflowId,
  workflowName,
  version,
  dirty,
  nodes,
  edges,
}: {
  open: boolean;
  onClose: () => void;
  workflowId: string;
  workflowName: string;
  /** The saved version the editor holds: what a new app publishes. */
  version: number;
  dirty: boolean;
  nodes: GraphNodeLike[];
  edges: GraphEdgeLike[];
}) {
  const ref = useModal(open);
  const client = useQueryClient();
  const apps = useQuery({
    queryKey: keys.apps(workflowId),
    enabled: open,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/apps", {
          params: { query: { workflow_id: workflowId, limit: 100 } },
        }),
      ),
  });
  const [chosen, setChosen] = useState<string | null>(null); // an app's id, or null: a new app
  const app = apps.data?.find((a) => a.id === chosen) ?? null;
  const [draft, setDraft] = useState<AppDraft>(() => newDraft(workflowName, nodes, edges));
  const [problems, setProblems] = useState<DraftProblem[]>([]);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const [deleting, setDeleting] = useState(false);

  // Opened: the newest app of the workflow, else a new one (once: a later read of the list
  // does not undo the owner's choice).
  const picked = useRef(false);
  useEffect(() => {
    if (!open) picked.current = false;
    else if (apps.data && !picked.current) {
      picked.current = true;
      setChosen((now) => now ?? apps.data[0]?.id ?? null);
    }
  }, [open, apps.data]);
  // A different app chosen (or the dialog opened again): its form afresh.
  const stamp = `${open}:${chosen ?? "new"}:${app ? "loaded" : "none"}`;
  useEffect(() => {
    if (!open) return;
    setDraft(app ? draftFromApp(app, nodes, edges) : newDraft(workflowName, nodes, edges));
    setProblems([]);
    setError(null);
    setDeleting(false);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [stamp]);

  const covers = useAssets("image", open);

  async function act(action: () => Promise<AppRecord | null>) {
    setBusy(true);
    setError(null);
    try {
      const result = await action();
      await client.invalidateQueries({ queryKey: keys.apps() });
      if (result) {
        setChosen(result.id);
        setDraft(draftFromApp(result, nodes, edges));
      }
    } catch (exc) {
      setError(messageOf(exc));
    } finally {
      setBusy(false);
    }
  }

  function checked<T>(made: { body: T; problems: DraftProblem[] }): T | null {
    setProblems(made.problems);
    return made.problems.length ? null : made.body;
  }

  const publish = () =>
    act(async () => {
      const body = checked(createBody(draft, workflowId, version));
      return body ? unwrap(await api.POST("/api/v1/apps", { body })) : null;
    });
  const update = (moveTo?: number) =>
    act(async () => {
      if (!app) return null;
      const body = checked(updateBody(draft, moveTo));
      if (!body) return null;
      return unwrap(
        await api.PATCH("/api/v1/apps/{app_id}", { params: { path: { app_id: app.id } }, body }),
      );
    });
  const setPublished = (published: boolean) =>
    act(async () =>
      app
        ? unwrap(
            await api.PATCH("/api/v1/apps/{app_id}", {
              params: { path: { app_id: app.id } },
              body: { published },
            }),
          )
        : null,
    );
  const remove = () =>
    act(async () => {
      if (!app) return null;
      unwrap(await api.DELETE("/api/v1/apps/{app_id}", { params: { path: { app_id: app.id } } }));
      setChosen(null);
      return null;
    });

  return (
    <dialog ref={ref} onCancel={onClose} aria-labelledby="publish-title" className="publish-dialog">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          void (app ? update() : publish());
        }}
      >
        <h2 id="publish-title">Publish as app</h2>
        {(apps.data?.length ?? 0) > 0 && (
          <div className="field">
            <label htmlFor="publish-which">App</label>
            <select
              id="publish-which"
              value={chosen ?? ""}
              onChange={(e) => setChosen(e.target.value || null)}
            >
              {apps.data?.map((a) => (
                <option key={a.id} value={a.id}>
                  {a.title} (version {a.workflow_version}
                  {a.published ? "" : ", unpublished"})
                </option>
              ))}
              <option value="">A new app</option>
            </select>
          </div>
        )}
        {app && <PublishedApp app={app} version={version} onError={setError} />}
        {dirty && (
          <div className="banner warn" role="note">
            This workflow has unsaved changes. An app runs a saved version: save first to publish
            what you see.
          </div>
        )}
        <AppFormFields
          draft={draft}
          onDraft={setDraft}
          problems={problems}
          covers={covers.data ?? []}
        />
        {problems.length > 0 && (
          <div className="banner error" role="alert" data-testid="publish-problems">
            {problems.map((p) => (
              <div key={`${p.field}:${p.message}`}>
                {p.field}: {p.message}
              </div>
            ))}
          </div>
        )}
        {error && (
          <div className="banner error" role="alert">
            {error}
          </div>
        )}
        <div className="row end publish-actions">
          <button type="button" onClick={onClose}>
            Close
          </button>
          {app && !deleting && (
            <button
              type="button"
              className="danger"
              onClick={() => setDeleting(true)}
              disabled={busy}
            >
              Delete app
            </button>
          )}
          {app && deleting && (
            <button type="button" className="danger" onClick={() => void remove()} disabled={busy}>
              Delete for good
            </button>
          )}
          {app && (
            <button type="button" onClick={() => void setPublished(!app.published)} disabled={busy}>
              {app.published ? "Unpublish" : "Publish again"}
            </button>
          )}
          {app && app.workflow_version !== version && (
            <button
              type="button"
              onClick={() => void update(version)}
              disabled={busy || dirty}
              title="Publish this form on the workflow's saved version the editor holds"
            >
              Move to version {version}
            </button>
          )}
          <button type="submit" className="primary" disabled={busy || (!app && dirty)}>
            {app ? "Update app" : `Publish version ${version}`}
          </button>
        </div>
      </form>
    </dialog>
  );
}

/** A published app's link, state and spend, and the snippet that embeds it. */
function PublishedApp({
  app,
  version,
  onError,
}: {
  app: AppRecord;
  version: number;
  onError: (message: string) => void;
}) {
  return (
    <div className="card publish-link" data-testid="published-app">
      <div className="row">
        <a href={app.url} target="_blank" rel="noreferrer" data-testid="app-link">
          {app.url}
        </a>
        <CopyButton text={app.url} onError={onError} />
      </div>
      <p className="small muted">
        {app.published ? "Published" : "Unpublished: visitors get “not available”"} · runs version{" "}
        {app.workflow_version}
        {app.workflow_version !== version ? ` (the editor holds version ${version})` : ""} · spent{" "}
        {app.spent_today} credits today, {app.spent_total} in all
      </p>
      <details>
        <summary className="small">Embed in a page</summary>
        <pre className="secret">{embedSnippet(app)}</pre>
        <p className="small muted">
          Only the origins listed under “Embedding” below may show it in a frame.
        </p>
      </details>
    </div>
  );
}
