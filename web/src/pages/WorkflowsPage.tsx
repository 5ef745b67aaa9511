import { useRef, useState } from "react";
import { Link, useNavigate } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { catalogMap, keys, useNodeTypes } from "../api/queries";
import type { GraphJson, SavedWorkflow, WorkflowSummary } from "../api/types";
import { TEMPLATES } from "../graph/templates";
import { TemplateCard } from "./TemplateCard";
import type { OpenState } from "./EditorPage";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBanner, NameForm, TableHead, useAction } from "../components/forms";
import { Status, formatTime } from "../components/Status";

const EMPTY_GRAPH: GraphJson = { nodes: [], edges: [], viewport: { x: 0, y: 0, zoom: 1 } };

async function fetchWorkflow(id: string) {
  return unwrap(
    await api.GET("/api/v1/workflows/{workflow_id}", { params: { path: { workflow_id: id } } }),
  );
}

async function createWorkflow(name: string, graph: unknown): Promise<SavedWorkflow> {
  return unwrap(
    await api.POST("/api/v1/workflows", { body: { name, graph_json: graph } as never }),
  );
}

/** Saves the exact graph_json as a .json file. */
function download(name: string, value: unknown) {
  const blob = new Blob([JSON.stringify(value, null, 2) + "\n"], { type: "application/json" });
  const url = URL.createObjectURL(blob);
  const link = document.createElement("a");
  link.href = url;
  link.download = `${name.replace(/[^\w.-]+/g, "_") || "workflow"}.json`;
  link.click();
  setTimeout(() => URL.revokeObjectURL(url), 1000);
}

export function WorkflowsPage() {
  const client = useQueryClient();
  const navigate = useNavigate();
  const [name, setName] = useState("");
  const [renaming, setRenaming] = useState<{ id: string; name: string } | null>(null);
  const [deleting, setDeleting] = useState<WorkflowSummary | null>(null);
  const fileInput = useRef<HTMLInputElement>(null);
  const { error, setError, act } = useAction();
  const types = useNodeTypes();
  const catalog = catalogMap(types.data);

  const list = useQuery({
    queryKey: keys.workflows,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows", {
          params: { query: { limit: 200, with_last_run: true } },
        }),
      ),
  });
  const refresh = () => client.invalidateQueries({ queryKey: keys.workflows });

  /** Creates and opens a workflow. A graph made elsewhere (imported, a template) is fitted
   * into view on opening, and the warnings the create answered with are shown there. */
  const createAndOpen = async (workflowName: string, graph: unknown, fit = false) => {
    const made = await createWorkflow(workflowName, graph);
    await refresh();
    const state: OpenState = { fit, warnings: made.warnings ?? [] };
    navigate(`/workflows/${made.id}`, { state });
  };
  const create = (workflowName: string, graph: unknown, fit = false) =>
    act(() => createAndOpen(workflowName, graph, fit));

  const rename = (id: string, newName: string) =>
    act(async () => {
      unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: id } },
          body: { name: newName } as never,
        }),
      );
      setRenaming(null);
      await refresh();
    });

  const duplicate = (item: WorkflowSummary) =>
    act(async () => {
      await createWorkflow(`${item.name} (copy)`, (await fetchWorkflow(item.id)).graph_json);
      await refresh();
    });

  const remove = (item: WorkflowSummary) => {
    setDeleting(null);
    return act(async () => {
      unwrap(
        await api.DELETE("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: item.id } },
        }),
      );
      await refresh();
    });
  };

  async function importFile(file: File) {
    let parsed: Record<string, unknown>;
    try {
      parsed = JSON.parse(await file.text()) as Record<string, unknown>;
    } catch {
      setError(`${file.name} is not a JSON file.`);
      return;
    }
    // Either an exported graph_json, or {name, graph_json}.
    const graph = parsed.graph_json ?? parsed;
    const imported =
      typeof parsed.name === "string" ? parsed.name : file.name.replace(/\.json$/i, "");
    await create(imported, graph, true);
  }

  return (
    <main className="page narrow">
      <h1>Workflows</h1>
      <ErrorBanner error={error} />
      <NameForm
        id="new-name"
        label="Name"
        placeholder="Narrated video"
        value={name}
        onChange={setName}
        onSubmit={() => void create(name.trim() || "Untitled workflow", EMPTY_GRAPH)}
        submitLabel="Create workflow"
      >
        <button
          type="button"
          style={{ alignSelf: "flex-end" }}
          onClick={() => fileInput.current?.click()}
        >
          Import JSON…
        </button>
        <input
          ref={fileInput}
          type="file"
          accept="application/json,.json"
          aria-label="Import a workflow from a JSON file"
          hidden
          onChange={(e) => {
            const file = e.target.files?.[0];
            if (file) void importFile(file);
            e.target.value = "";
          }}
        />
      </NameForm>
      {list.isPending ? (
        <p>Loading…</p>
      ) : list.data && list.data.length > 0 ? (
        <div className="table-scroll">
          <table className="stack-table">
            <TableHead columns={["Name", "Nodes", "Created", "Last run"]} actions />
            <tbody>
              {list.data.map((item) => (
                <tr key={item.id}>
                  <td>
                    {renaming?.id === item.id ? (
                      <form
                        className="row"
                        onSubmit={(e) => {
                          e.preventDefault();
                          void rename(item.id, renaming.name);
                        }}
                      >
                        <input
                          aria-label="New name"
                          value={renaming.name}
                          autoFocus
                          onChange={(e) => setRenaming({ id: item.id, name: e.target.value })}
                        />
                        <button type="submit">OK</button>
                        <button type="button" onClick={() => setRenaming(null)}>
                          Cancel
                        </button>
                      </form>
                    ) : (
                      <Link to={`/workflows/${item.id}`}>{item.name}</Link>
                    )}
                  </td>
                  <td data-label="Nodes">{item.node_count}</td>
                  <td data-label="Created">{formatTime(item.created_at)}</td>
                  <td data-label="Last run">
                    <Status status={item.last_run_status} />
                  </td>
                  <td className="actions">
                    <div className="row end">
                      <Link to={`/workflows/${item.id}/runs`} className="button">
                        Runs
                      </Link>
                      <button
                        type="button"
                        onClick={() => setRenaming({ id: item.id, name: item.name })}
                      >
                        Rename
                      </button>
                      <button type="button" onClick={() => void duplicate(item)}>
                        Duplicate
                      </button>
                      <button
                        type="button"
                        onClick={() =>
                          void act(async () =>
                            download(item.name, (await fetchWorkflow(item.id)).graph_json),
                          )
                        }
                      >
                        Export
                      </button>
                      <button type="button" className="danger" onClick={() => setDeleting(item)}>
                        Delete
                      </button>
                    </div>
                  </td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      ) : (
        <p className="muted">
          No workflows yet. Name one above and press “Create workflow”, import a JSON file, or start
          from a template below.
        </p>
      )}
      <section aria-labelledby="templates-title">
        <h2 id="templates-title">Start from a template</h2>
        <ul className="template-grid">
          {TEMPLATES.map((t) => (
            <TemplateCard
              key={t.id}
              template={t}
              catalog={catalog}
              catalogLoaded={!!types.data}
              onCreate={(name, graph) => createAndOpen(name, graph, true)}
            />
          ))}
        </ul>
      </section>
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete"
        onCancel={() => setDeleting(null)}
        onConfirm={() => deleting && void remove(deleting)}
      >
        <p>Its running runs are cancelled and its webhooks stop at once.</p>
      </ConfirmDialog>
    </main>
  );
}
