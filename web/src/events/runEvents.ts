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

/** What a node shows while a run goes on: its state, progress, output and error. */
export interface NodeLive {
  status: Exclude<NodeStatus, "pending">;
  progress?: number;
  cached?: boolean;
  creditsUsed?: number;
  artifactId?: string | null;
  error?: string | null;
}

/** The run itself: its status, what it cost, why it ended, and the input it was given. */
export interface RunView {
  runId: string;
  status: RunStatus;
  creditsUsed?: number;
  durationMs?: number;
  error?: string;
  input?: Record<string, unknown> | null;
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

/** The state of a run as GET .../runs/{id} returns it. */
export function fromRunRecord(run: Run): RunState {
  return {
    run: {
      runId: run.id,
      status: shownRunStatus(run),
      creditsUsed: run.credits_used,
      durationMs: run.duration_ms,
      error: run.error?.message,
      input: run.input ?? null,
    },
    nodes: Object.fromEntries(
      run.node_runs.map((n) => [
        n.node_id,
        {
          status: n.status === "pending" ? "queued" : n.status,
          cached: n.cached,
          creditsUsed: n.credits_used,
          artifactId: n.artifact_id,
          error: (n.error as ErrorLike | null)?.message ?? null,
        } satisfies NodeLive,
      ]),
    ),
    lastSeq: 0,
  };
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
