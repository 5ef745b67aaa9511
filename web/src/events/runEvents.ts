// The one place run events become run and node state: a pure reducer, (state, event) ->
// state, used by the editor (live states on the nodes), the run page and anything else that
// follows a run. The server replays a run's events from seq 1 on subscribe, so folding every
// event over the empty state gives the run as the server last recorded it.
import type { NodeStatus, Run, RunStatus } from "../api/types";

export interface RunEvent {
  type: string;
  seq: number;
  ts: string;
  run_id: string;
  workflow_id: string;
  node_id?: string;
  data: Record<string, unknown>;
}

/** One item's node run of a node run once per item of a ForEach (docs/batches.md). */
export interface ItemLive {
  status: Exclude<NodeStatus, "pending">;
  artifactId?: string | null;
  error?: string | null;
  creditsUsed?: number;
}

/** A node run once per item: how far its items are ("17/40") and each item's state. */
export interface ItemsLive {
  total: number;
  done: number;
  failed: number;
  byIndex: Record<number, ItemLive>;
}

/** What a node shows while a run goes on: its state, progress, output and error. */
export interface NodeLive {
  status: Exclude<NodeStatus, "pending">;
  progress?: number;
  cached?: boolean;
  creditsUsed?: number;
  artifactId?: string | null;
  error?: string | null;
  /** For a node run once per item of a ForEach. */
  items?: ItemsLive;
  /** For a ForEach that completed: how many items it split its input into. */
  fanOut?: number;
}

/** The run itself: its status, what it cost, why it ended, and the input it was given. */
export interface RunView {
  runId: string;
  status: RunStatus;
  creditsUsed?: number;
  durationMs?: number;
  error?: string;
  input?: Record<string, unknown> | null;
  /** The workflow version the run was started from, when read from its record. */
  workflowVersion?: number | null;
}

export interface RunState {
  run: RunView | null;
  nodes: Record<string, NodeLive>;
  /** The seq of the last event folded in; older or repeated events change nothing. */
  lastSeq: number;
}

export const EMPTY_RUN: RunState = { run: null, nodes: {}, lastSeq: 0 };

/** The events after which a run changes no more. */
export const TERMINAL_EVENTS: ReadonlySet<string> = new Set([
  "run.completed",
  "run.failed",
  "run.cancelled",
]);

export function isTerminal(type: string): boolean {
  return TERMINAL_EVENTS.has(type);
}

interface ErrorLike {
  code?: string;
  message?: string;
}

/** A run's status as the app shows it. A server that predates the `cancelled` status reports
 * a cancelled run as `failed` with the error code `cancelled`; both read as `cancelled`. */
export function shownRunStatus(run: { status: RunStatus; error?: ErrorLike | null }): RunStatus {
  return run.status === "failed" && run.error?.code === "cancelled" ? "cancelled" : run.status;
}

/** A run just accepted by execute: running, every given node queued. */
export function startedRun(
  runId: string,
  nodeIds: string[],
  input: Record<string, unknown> | null = null,
): RunState {
  return {
    run: { runId, status: "running", input },
    nodes: Object.fromEntries(nodeIds.map((id) => [id, { status: "queued" }])),
    lastSeq: 0,
  };
}

const FINISHED: ReadonlySet<string> = new Set(["completed", "failed", "skipped", "cancelled"]);

/** `items` with item `index` (of `total`) now `item`; the counts recomputed. */
function withItem(
  items: ItemsLive | undefined,
  index: number,
  total: number,
  item: ItemLive,
): ItemsLive {
  const byIndex = { ...(items?.byIndex ?? {}), [index]: item };
  const all = Object.values(byIndex);
  return {
    total: Math.max(total, all.length),
    done: all.filter((i) => FINISHED.has(i.status)).length,
    failed: all.filter((i) => i.status === "failed").length,
    byIndex,
  };
}

/** A node's state as its items leave it: running until every item finished, then failed
 * when one failed, else completed. A ForEach keeps its own state (its items are picks). */
function withItems(before: NodeLive, items: ItemsLive): NodeLive {
  if (before.fanOut !== undefined) return { ...before, items };
  const status: NodeLive["status"] =
    items.done < items.total ? "running" : items.failed > 0 ? "failed" : "completed";
  const creditsUsed = Object.values(items.byIndex).reduce(
    (sum, i) => sum + (i.creditsUsed ?? 0),
    0,
  );
  return {
    status,
    items,
    creditsUsed,
    error: items.failed > 0 ? `${items.failed} of ${items.total} items failed` : null,
  };
}

/** The state of a run as GET .../runs/{id} returns it. */
export function fromRunRecord(run: Run): RunState {
  const state = fromDrawnNodes(run);
  const totals = new Map<string, number>();
  for (const n of run.node_runs) {
    if (n.item_index != null) totals.set(n.node_id, (totals.get(n.node_id) ?? 0) + 1);
  }
  for (const n of run.node_runs) {
    if (n.item_index == null) continue;
    const item: ItemLive = {
      status: n.status === "pending" ? "queued" : n.status,
      artifactId: n.artifact_id,
      creditsUsed: n.credits_used,
      error: (n.error as ErrorLike | null)?.message ?? null,
    };
    const before: NodeLive = state.nodes[n.node_id] ?? { status: "queued" };
    const items = withItem(before.items, n.item_index, totals.get(n.node_id) ?? 0, item);
    state.nodes[n.node_id] = withItems(before, items);
  }
  return state;
}

function fromDrawnNodes(run: Run): RunState {
  return {
    run: {
      runId: run.id,
      status: shownRunStatus(run),
      creditsUsed: run.credits_used,
      durationMs: run.duration_ms,
      error: run.error?.message,
      input: run.input ?? null,
      workflowVersion: run.workflow_version ?? null,
    },
    nodes: Object.fromEntries(
      run.node_runs
        .filter((n) => n.item_index == null)
        .map((n) => [
          n.node_id,
          {
            status: n.status === "pending" ? "queued" : n.status,
            cached: n.cached,
            creditsUsed: n.credits_used,
            artifactId: n.artifact_id,
            error: (n.error as ErrorLike | null)?.message ?? null,
            fanOut:
              n.type === "ForEach" && n.status === "completed"
                ? itemsOf(run, n.node_id)
                : undefined,
          } satisfies NodeLive,
        ]),
    ),
    lastSeq: 0,
  };
}

function itemsOf(run: Run, nodeId: string): number {
  return run.node_runs.filter((n) => n.node_id === nodeId && n.item_index != null).length;
}

function errorOf(data: Record<string, unknown>, key = "error"): ErrorLike | undefined {
  const value = data[key];
  return typeof value === "object" && value !== null ? (value as ErrorLike) : undefined;
}

function reduceNode(before: NodeLive, event: RunEvent): NodeLive {
  const data = event.data;
  switch (event.type) {
    case "node.started":
      return { ...before, status: "running", progress: 0, error: null };
    case "node.progress":
      return { ...before, status: "running", progress: Number(data.progress ?? 0) };
    case "node.completed":
      return {
        status: "completed",
        artifactId: (data.artifact_id as string | undefined) ?? null,
        cached: Boolean(data.cached),
        creditsUsed: Number(data.credits_used ?? 0),
        fanOut: typeof data.items === "number" ? data.items : undefined,
      };
    case "node.failed":
      return { status: "failed", error: errorOf(data)?.message ?? "failed" };
    case "node.skipped":
      return {
        status: "skipped",
        error: `Skipped: ${errorOf(data, "reason")?.message ?? "an upstream node failed"}.`,
      };
    case "node.cancelled":
      return { status: "cancelled" };
    default:
      return before;
  }
}

function reduceRunView(before: RunView, event: RunEvent): RunView {
  const data = event.data;
  const ended = {
    creditsUsed: Number(data.credits_used ?? 0),
    durationMs: data.duration_ms === undefined ? undefined : Number(data.duration_ms),
  };
  switch (event.type) {
    case "run.started":
      return { ...before, status: "running" };
    case "run.completed":
      return { ...before, ...ended, status: "completed", error: undefined };
    case "run.failed": {
      const error = errorOf(data);
      return {
        ...before,
        ...ended,
        status: shownRunStatus({ status: "failed", error }),
        error: error?.message,
      };
    }
    case "run.cancelled":
      return { ...before, ...ended, status: "cancelled", error: errorOf(data)?.message };
    default:
      return before;
  }
}

/** The state after one event. Pure: never mutates `state`. */
export function reduceRun(state: RunState, event: RunEvent): RunState {
  if (event.seq <= state.lastSeq) return state;
  const lastSeq = event.seq;
  if (event.type.startsWith("node.") && event.node_id) {
    const before = state.nodes[event.node_id] ?? { status: "queued" };
    const index = event.data.item_index;
    if (typeof index === "number") {
      // One item's node run: folded into the node's items (docs/batches.md).
      const was: NodeLive = before.items?.byIndex[index] ?? { status: "queued" };
      const now = reduceNode(was, event);
      const item: ItemLive = {
        status: now.status,
        artifactId: now.artifactId,
        error: now.error,
        creditsUsed: now.creditsUsed,
      };
      const items = withItem(before.items, index, Number(event.data.item_count ?? 0), item);
      return {
        ...state,
        lastSeq,
        nodes: { ...state.nodes, [event.node_id]: withItems(before, items) },
      };
    }
    return {
      ...state,
      lastSeq,
      nodes: { ...state.nodes, [event.node_id]: reduceNode(before, event) },
    };
  }
  if (event.type.startsWith("run.")) {
    const before: RunView =
      state.run?.runId === event.run_id
        ? state.run
        : { runId: event.run_id, status: "running", input: null };
    return { ...state, lastSeq, run: reduceRunView(before, event) };
  }
  return { ...state, lastSeq };
}
