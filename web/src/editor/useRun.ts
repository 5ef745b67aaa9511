import { useCallback, useEffect, useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import { watchRun } from "../events/runSocket";
import {
  EMPTY_RUN,
  fromRunRecord,
  isTerminal,
  reduceRun,
  startedRun,
  type RunEvent,
  type RunState,
} from "../events/runEvents";

export type { RunView } from "../events/runEvents";

/** A run of the open workflow: execute, then every node's live state from the WebSocket,
 * folded by reduceRun. */
export function useRun(workflowId: string) {
  const client = useQueryClient();
  const [state, setState] = useState<RunState>(EMPTY_RUN);
  const stop = useRef<(() => void) | null>(null);

  useEffect(() => () => stop.current?.(), []);

  const apply = useCallback(
    (event: RunEvent) => {
      setState((s) => reduceRun(s, event));
      if (isTerminal(event.type)) {
        void client.invalidateQueries({ queryKey: keys.me });
        void client.invalidateQueries({ queryKey: keys.runs(workflowId) });
        void client.invalidateQueries({ queryKey: keys.workflows });
      }
    },
    [client, workflowId],
  );

  // On opening the editor, show the newest run's node states and outputs (and follow it if it
  // is still running).
  useEffect(() => {
    let cancelled = false;
    void (async () => {
      const path = { workflow_id: workflowId };
      const latest = unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/runs", {
          params: { path, query: { limit: 1 } },
        }),
      )[0];
      if (!latest || cancelled) return;
      const full = unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/runs/{run_id}", {
          params: { path: { ...path, run_id: latest.id } },
        }),
      );
      if (cancelled) return;
      setState(fromRunRecord(full));
      if (full.status === "running") stop.current = watchRun(full.id, apply);
    })().catch(() => undefined);
    return () => {
      cancelled = true;
    };
  }, [workflowId, apply]);

  /** Execute the saved workflow; `cache: false` recomputes every node. */
  const start = useCallback(
    async (nodeIds: string[], input: Record<string, unknown> | null, cache = true) => {
      stop.current?.();
      const accepted = unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/execute", {
          params: { path: { workflow_id: workflowId } },
          body: { ...(input ? { input } : {}), cache, trigger: "editor" } as never,
        }),
      );
      setState(startedRun(accepted.run_id, nodeIds, input));
      stop.current = watchRun(accepted.run_id, apply);
      return accepted;
    },
    [workflowId, apply],
  );

  /** Retry the shown (failed or cancelled) run with the workflow as saved now: the
   * server reuses every completed node whose type, params and inputs are unchanged. */
  const retryCurrent = useCallback(
    async (nodeIds: string[]) => {
      const shown = state.run;
      if (!shown) return null;
      stop.current?.();
      const accepted = unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/runs/{run_id}/retry", {
          params: { path: { workflow_id: workflowId, run_id: shown.runId } },
          body: { trigger: "editor", graph: "current" } as never,
        }),
      );
      setState(startedRun(accepted.run_id, nodeIds, shown.input ?? null));
      stop.current = watchRun(accepted.run_id, apply);
      return accepted;
    },
    [state.run, workflowId, apply],
  );

  const cancel = useCallback(async () => {
    if (!state.run) return;
    unwrap(
      await api.POST("/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel", {
        params: { path: { workflow_id: workflowId, run_id: state.run.runId } },
      }),
    );
  }, [state.run, workflowId]);

  return { run: state.run, live: state.nodes, start, retryCurrent, cancel };
}
