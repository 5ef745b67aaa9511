import { useEffect, useMemo, useReducer, useState } from "react";
import { Link, useNavigate, useParams } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import type { GraphJson, Run } from "../api/types";
import { watchRun } from "../events/runSocket";
import { shortRunId } from "../format/runName";
import {
  EMPTY_RUN,
  isTerminal,
  reduceRun,
  shownRunStatus,
  type RunEvent,
} from "../events/runEvents";
import { ArtifactPreview } from "../editor/ArtifactPreview";
import { outputNodeIds, outputsFirst } from "../graph/outputs";
import { iterationLabel, repeatBounds } from "../graph/repeat";
import { labelsOf } from "../graph/label";
import { REMOVE, SchemaForm } from "../forms/SchemaForm";
import type { JsonSchema } from "../forms/schema";
import { catalogMap, keys, useNodeTypes } from "../api/queries";
import { useAction, ErrorBanner } from "../components/forms";
import {
  Status,
  TRIGGER_LABEL,
  creditsLabel,
  formatDuration,
  formatTime,
} from "../components/Status";

/** One run: its nodes, every artifact with a download link, and its events replayed from
 * the server's log (then live, while it runs, folded by reduceRun); run it again, with or
 * without the cache, or retry a failed or cancelled run from the node that stopped it. */
export function RunPage() {
  const { runId = "" } = useParams();
  // A new run (after "Run again") starts from an empty state.
  return <RunDetails key={runId} />;
}

function RunDetails() {
  const { workflowId = "", runId = "" } = useParams();
  const navigate = useNavigate();
  const client = useQueryClient();
  const [events, setEvents] = useState<RunEvent[]>([]);
  const [live, dispatch] = useReducer(reduceRun, EMPTY_RUN);
  const { error: actionError, act } = useAction();
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
  const graph = useRunGraph(workflowId, run.data);
  const repeats = useMemo(() => (graph ? repeatBounds(graph) : new Map<string, number>()), [graph]);
  const labels = labelsOf(graph);
  useEffect(() => {
    setEvents([]);
    return watchRun(runId, (event) => {
      setEvents((list) => [...list, event]);
      dispatch(event);
      if (isTerminal(event.type)) {
        void client.invalidateQueries({ queryKey: keys.run(workflowId, runId) });
      }
    });
  }, [client, runId, workflowId]);

  const again = (cache: boolean) =>
    act(async () => {
      const accepted = unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/execute", {
          params: { path: { workflow_id: workflowId } },
          body: { input: run.data?.input ?? null, cache, trigger: "editor" } as never,
        }),
      );
      void client.invalidateQueries({ queryKey: keys.runs(workflowId) });
      navigate(`/workflows/${workflowId}/runs/${accepted.run_id}`);
    });

  // A failed or cancelled run goes on from where it stopped: completed nodes are reused
  // (no credits), the failed node and everything after it run again.
  // graph "current": the workflow as saved now (a fix saved since the run failed).
  // `params`: node id -> params changed for the retry (merged into the run's graph).
  const retry = (graph: "run" | "current", params?: Record<string, Record<string, unknown>>) =>
    act(async () => {
      const accepted = unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/runs/{run_id}/retry", {
          params: { path: { workflow_id: workflowId, run_id: runId } },
          body: { trigger: "editor", graph, ...(params ? { params } : {}) } as never,
        }),
      );
      void client.invalidateQueries({ queryKey: keys.runs(workflowId) });
      void client.invalidateQueries({ queryKey: keys.run(workflowId, runId) });
      navigate(`/workflows/${workflowId}/runs/${accepted.run_id}`);
    });

  if (run.error)
    return (
      <main className="page narrow">
        <div className="banner error">{run.error.message}</div>
      </main>
    );
  if (!run.data) return <p className="page">Loading…</p>;
  const r = run.data;
  // The events are newer than the last fetch while the run goes on.
  const status =
    live.run?.runId === r.id && r.status === "running" ? live.run.status : shownRunStatus(r);
  const running = status === "running";
  const retryable = status === "failed" || status === "cancelled";
  return (
    <main className="page narrow">
      <h1>Run {shortRunId(r.id)}</h1>
      <p className="row">
        <Status status={status} /> <span>{TRIGGER_LABEL[r.trigger] ?? r.trigger}</span>
        <span>started {formatTime(r.created_at)}</span>
        <span>{formatDuration(r.duration_ms)}</span>
        <span>
          {r.credits_used} credits used of {r.estimated_credits} held
        </span>
        <Link to={`/workflows/${workflowId}`}>Workflow</Link>
        <Link to={`/workflows/${workflowId}/runs`}>All runs of it</Link>
      </p>
      {r.parent_run_id && r.parent_workflow_id && (
        <p className="small">
          Run of a Workflow node ({r.parent_node_id}) of{" "}
          <Link to={`/workflows/${r.parent_workflow_id}/runs/${r.parent_run_id}`}>
            its parent run
          </Link>
          .
        </p>
      )}
      {(r.retried_from || (r.retries && r.retries.length > 0)) && (
        <p className="row small" aria-label="Retries">
          {r.retried_from && (
            <span>
              Retry of{" "}
              <Link to={`/workflows/${workflowId}/runs/${r.retried_from}`}>
                run {r.retried_from}
              </Link>
            </span>
          )}
          {r.retries && r.retries.length > 0 && (
            <span>
              Retried as{" "}
              {r.retries.map((id, i) => (
                <span key={id}>
                  {i > 0 ? ", " : ""}
                  <Link to={`/workflows/${workflowId}/runs/${id}`}>run {id}</Link>
                </span>
              ))}
            </span>
          )}
        </p>
      )}
      <div className="row" role="group" aria-label="Run actions">
        {retryable && (
          <button
            type="button"
            className="primary"
            onClick={() => void retry("run")}
            title="Reuse every completed node (no credits) and run the failed node and everything after it"
          >
            Retry from failed node
          </button>
        )}
        {retryable && (
          <button
            type="button"
            onClick={() => void retry("current")}
            title="Run the workflow as saved now: nodes changed since this run run again, the others are reused"
          >
            Retry with the saved workflow
          </button>
        )}
        <button
          type="button"
          className={retryable ? undefined : "primary"}
          disabled={running}
          onClick={() => void again(true)}
        >
          Run again
        </button>
        <button type="button" disabled={running} onClick={() => void again(false)}>
          Run without cache
        </button>
        <span className="muted small">
          Same input. Without cache, every node is computed and charged again.
        </span>
      </div>
      {retryable && graph && (
        <RetryWithParams
          graph={graph}
          failedNode={r.error?.node_id ?? null}
          labels={labels}
          onRetry={(params) => void retry("run", params)}
        />
      )}
      <ErrorBanner error={actionError} />
      {r.error && (
        <div className={`banner ${status === "cancelled" ? "warn" : "error"}`}>
          {r.error.code}: {r.error.message}
          {r.error.node_id ? ` (node ${labels.get(r.error.node_id) ?? r.error.node_id})` : ""}
        </div>
      )}
      {(() => {
        const outputs = graph ? new Set(outputNodeIds(graph)) : null;
        const split = outputsFirst(
          r.node_runs.filter((n) => n.item_index == null), // items are listed under their node
          outputs,
        );
        const card = (node: NodeRunEntry) => (
          <NodeRunCard
            key={node.node_id}
            node={node}
            label={labels.get(node.node_id)}
            live={r.status === "running" ? live.nodes[node.node_id] : undefined}
            liveCached={live.nodes[node.node_id]?.cached}
            liveCredits={live.nodes[node.node_id]?.creditsUsed}
          />
        );
        return (
          <>
            {split.outputs.length > 0 && (
              <section aria-labelledby="run-outputs">
                <h2 id="run-outputs">Outputs</h2>
                <p className="muted small">What the run made: the nodes no connection leaves.</p>
                <ul className="artifact-list" aria-label="Outputs">
                  {split.outputs.map(card)}
                </ul>
              </section>
            )}
            {r.input && (
              <>
                <h2>Input</h2>
                <pre className="card">{JSON.stringify(r.input, null, 2)}</pre>
              </>
            )}
            <h2>{split.outputs.length > 0 ? "Other nodes" : "Nodes and artifacts"}</h2>
            <ul className="artifact-list" aria-label="Nodes">
              {split.others.map(card)}
              {itemGroups(r.node_runs).map(([nodeId, items]) => (
                <ItemGroup
                  key={`items-${nodeId}`}
                  nodeId={nodeId}
                  label={labels.get(nodeId)}
                  items={items}
                  bound={repeats.get(nodeId)}
                />
              ))}
            </ul>
          </>
        );
      })()}
      <h2>Events</h2>
      <ol className="small mono" aria-label="Run events">
        {events.map((event) => (
          <li key={event.seq}>
            {event.ts.slice(11, 23)} {event.type}
            {event.node_id ? ` ${event.node_id}` : ""}
            {typeof event.data.item_index === "number"
              ? ` ${event.node_id && repeats.has(event.node_id) ? "iteration" : "item"} ${event.data.item_index + 1}`
              : ""}
            {event.type === "node.progress"
              ? ` ${Math.round(Number(event.data.progress) * 100)}%`
              : ""}
          </li>
        ))}
      </ol>
    </main>
  );
}

type NodeRunEntry = Run["node_runs"][number];

/** The graph the run was started from: its workflow version (immutable, so fetched once),
 * or the workflow as saved now for runs older than versions. Null until known. The run
 * record itself carries no graph (docs/webapp.md, "The run page"). */
function useRunGraph(workflowId: string, run: Run | undefined): GraphJson | null {
  const version = run?.workflow_version ?? null;
  const query = useQuery({
    // Not keys.workflow: the editor owns that entry (never refetched under it).
    queryKey:
      version === null ? ["run-graph", workflowId, "current"] : keys.version(workflowId, version),
    enabled: run !== undefined,
    staleTime: version === null ? 0 : Infinity,
    retry: false,
    queryFn: async (): Promise<{ graph_json: unknown }> =>
      version === null
        ? unwrap(
            await api.GET("/api/v1/workflows/{workflow_id}", {
              params: { path: { workflow_id: workflowId } },
            }),
          )
        : unwrap(
            await api.GET("/api/v1/workflows/{workflow_id}/versions/{version}", {
              params: { path: { workflow_id: workflowId, version } },
            }),
          ),
  });
  return (query.data?.graph_json as GraphJson | undefined) ?? null;
}

/** One node of the run: status, duration, credits, the ComfyUI server that ran it (a fleet's),
 * error, sub-workflow link and its output. */
function NodeRunCard({
  node,
  label,
  live,
  liveCached,
  liveCredits,
}: {
  node: NodeRunEntry;
  /** The node's name in the run's graph (data.label), when it has one. */
  label: string | undefined;
  live: { status: string } | undefined;
  liveCached: boolean | undefined;
  liveCredits: number | undefined;
}) {
  const nodeStatus = live ? live.status : node.status;
  const cached = liveCached ?? node.cached;
  return (
    <li className="card" data-node-id={node.node_id} data-status={nodeStatus}>
      <div className="row">
        <NodeName id={node.node_id} label={label} /> <span className="muted">{node.type}</span>
        <Status status={nodeStatus} cached={cached} />
        <span className="muted small">
          {formatDuration(node.duration_ms)} ·{" "}
          {creditsLabel(liveCredits ?? node.credits_used, cached)}
          {node.server && <> · on {node.server}</>}
        </span>
      </div>
      {node.error && (
        <div className="error-text">
          {String((node.error as { message?: string }).message ?? "")}
        </div>
      )}
      {node.child_run_id && node.child_workflow_id && (
        <div className="small">
          <Link to={`/workflows/${node.child_workflow_id}/runs/${node.child_run_id}`}>
            Sub-workflow run
          </Link>
        </div>
      )}
      {node.artifact_id && <ArtifactPreview artifactId={node.artifact_id} />}
    </li>
  );
}

/** "Change params and retry": one node of the run's graph at a time (the failed one first),
 * its params as the editor's form, pre-filled with what the run used; the retry runs the
 * run's graph with the changes merged in, reusing what they do not touch. */
function RetryWithParams({
  graph,
  failedNode,
  labels,
  onRetry,
}: {
  graph: GraphJson;
  failedNode: string | null;
  labels: Map<string, string>;
  onRetry: (params: Record<string, Record<string, unknown>>) => void;
}) {
  const catalog = catalogMap(useNodeTypes().data);
  const [chosen, setChosen] = useState(failedNode ?? graph.nodes[0]?.id ?? "");
  const [edits, setEdits] = useState<Record<string, Record<string, unknown>>>({});
  const node = graph.nodes.find((n) => n.id === chosen);
  const spec = node ? catalog.get(node.type) : undefined;
  const changed = Object.values(edits).reduce((sum, e) => sum + Object.keys(e).length, 0);
  return (
    <details className="card retry-params">
      <summary>Change params and retry</summary>
      <label htmlFor="retry-node">Node</label>
      <select id="retry-node" value={chosen} onChange={(e) => setChosen(e.target.value)}>
        {graph.nodes.map((n) => (
          <option key={n.id} value={n.id}>
            {labels.get(n.id) ?? n.id} ({n.type}){n.id === failedNode ? " — failed" : ""}
          </option>
        ))}
      </select>
      {node && spec ? (
        <SchemaForm
          key={node.id}
          schema={spec.params_schema as JsonSchema}
          nodeType={spec.type}
          data={{ ...node.data, ...(edits[node.id] ?? {}) }}
          idPrefix={`retry-${node.id}`}
          onChange={(name, value) => {
            if (value === REMOVE) return; // a retry changes params, it cannot unset one
            setEdits((all) => ({ ...all, [node.id]: { ...(all[node.id] ?? {}), [name]: value } }));
          }}
        />
      ) : (
        <p className="muted small">No params to change here.</p>
      )}
      <button
        type="button"
        className="primary"
        disabled={changed === 0}
        onClick={() => onRetry(edits)}
        title="Reuse every completed node these changes do not affect; run the rest"
      >
        Retry with {changed} changed param{changed === 1 ? "" : "s"}
      </button>
    </details>
  );
}

/** A node as the run page names it: its name (the id beside it), else its id. */
function NodeName({ id, label }: { id: string; label: string | undefined }) {
  if (!label) return <b>{id}</b>;
  return (
    <>
      <b className="node-label">{label}</b> <span className="muted mono small">{id}</span>
    </>
  );
}

/** A batch's item entries, by node, in record order (docs/batches.md). */
function itemGroups(nodeRuns: NodeRunEntry[]): [string, NodeRunEntry[]][] {
  const groups = new Map<string, NodeRunEntry[]>();
  for (const node of nodeRuns) {
    if (node.item_index == null) continue;
    groups.set(node.node_id, [...(groups.get(node.node_id) ?? []), node]);
  }
  return [...groups.entries()];
}

const ITEM_DONE = new Set(["completed", "failed", "skipped", "cancelled"]);

/** The node runs of one node run once per item: a count, and each item with its status;
 * an item's output is loaded when it is opened (a batch may have a thousand). In a Repeat
 * region (`bound`, its max_iterations) the items are iterations (docs/repeat.md). */
function ItemGroup({
  nodeId,
  label,
  items,
  bound,
}: {
  nodeId: string;
  label: string | undefined;
  items: NodeRunEntry[];
  bound?: number;
}) {
  const done = items.filter((i) => ITEM_DONE.has(i.status)).length;
  return (
    <li className="card" data-node-id={nodeId} data-items={items.length}>
      <details>
        <summary>
          <NodeName id={nodeId} label={label} /> <span className="muted">{items[0]?.type}</span>{" "}
          {bound === undefined ? (
            <span aria-label="Items done">
              {done}/{items.length} items
            </span>
          ) : (
            <span aria-label="Iteration">{iterationLabel(items.length, bound)}</span>
          )}
        </summary>
        <ol className="item-list">
          {items.map((item) => (
            <ItemRow
              key={item.item_index}
              item={item}
              noun={bound === undefined ? "Item" : "Iteration"}
            />
          ))}
        </ol>
      </details>
    </li>
  );
}

function ItemRow({ item, noun }: { item: NodeRunEntry; noun: "Item" | "Iteration" }) {
  const [open, setOpen] = useState(false);
  const index = (item.item_index ?? 0) + 1;
  return (
    <li data-item-index={item.item_index}>
      <span>
        {noun} {index}
      </span>{" "}
      <Status status={item.status} cached={item.cached} />
      {item.error && (
        <span className="error-text">
          {" "}
          {String((item.error as { message?: string }).message ?? "")}
        </span>
      )}
      {item.artifact_id && (
        <button type="button" aria-expanded={open} onClick={() => setOpen(!open)}>
          {open ? `Hide ${noun.toLowerCase()} ${index}` : `Show ${noun.toLowerCase()} ${index}`}
        </button>
      )}
      {open && item.artifact_id && <ArtifactPreview artifactId={item.artifact_id} />}
    </li>
  );
}
