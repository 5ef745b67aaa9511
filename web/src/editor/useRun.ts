import { useCallback, useEffect, useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { RunStatus } from "../api/types";
import { watchRun, type RunEvent } from "../events/runSocket";
import type { NodeLive } from "./context";

export interface RunView {
  runId: string;
  status: RunStatus;
  creditsUsed?: number;
  error?: string;
}

/** A run of the open workflow: execute, then every node's live state from the WebSocket. */
export function useRun(workflowId: string) {
  const client = useQueryClient();
  const [run, setRun] = useState<RunView | null>(null);
  const [live, setLive] = useState<Record<string, NodeLive>>({});
  const stop = useRef<(() => void) | null>(null);

  useEffect(() => () => stop.current?.(), []);

  const apply = useCallback(
    (event: RunEvent) => {
      const data = event.data;
      const node = event.node_id;
      if (node) {
        setLive((previous) => {
          const before = previous[node] ?? { status: "queued" };
          let next: NodeLive = before;
          switch (event.type) {
            case "node.started":
              next = { ...before, status: "running", progress: 0 };
              break;
            case "node.progress":
              next = { ...before, status: "running", progress: Number(data.progress ?? 0) };
              break;
            case "node.completed":
              next = {
                status: "completed",
                artifactId: (data.artifact_id as string | undefined) ?? null,
                cached: Boolean(data.cached),
              };
              break;
            case "node.failed": {
              const error = data.error as { message?: string } | undefined;
              next = { status: "failed", error: error?.message ?? "failed" };
              break;
            }
            case "node.skipped":
              next = { status: "skipped", error: "Skipped: an upstream node failed." };
              break;
            case "node.cancelled":
              next = { status: "cancelled" };
              break;
          }
          return { ...previous, [node]: next };
        });
      } else if (event.type === "run.completed" || event.type === "run.failed") {
        const error = data.error as { message?: string } | undefined;
        setRun(
          (r) =>
            r && {
              ...r,
              status: event.type === "run.completed" ? "completed" : "failed",
              creditsUsed: Number(data.credits_used ?? 0),
              error: error?.message,
            },
        );
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
      setLive(
        Object.fromEntries(
          full.node_runs.map((n) => [
            n.node_id,
            {
              status: n.status === "pending" ? "queued" : n.status,
              cached: n.cached,
              artifactId: n.artifact_id,
              error: (n.error as { message?: string } | null)?.message ?? null,
            } satisfies NodeLive,
          ]),
        ),
      );
      setRun({ runId: full.id, status: full.status, creditsUsed: full.credits_used });
      if (full.status === "running") stop.current = watchRun(full.id, apply);
    })().catch(() => undefined);
    return () => {
      cancelled = true;
    };
  }, [workflowId, apply]);

  const start = useCallback(
    async (nodeIds: string[], input: Record<string, unknown> | null) => {
      stop.current?.();
      const accepted = unwrap(
        await api.POST("/api/v1/workflows/{workflow_id}/execute", {
          params: { path: { workflow_id: workflowId } },
          body: { ...(input ? { input } : {}), trigger: "editor" } as never,
        }),
      );
      setLive(Object.fromEntries(nodeIds.map((id) => [id, { status: "queued" } as NodeLive])));
      setRun({ runId: accepted.run_id, status: "running" });
      stop.current = watchRun(accepted.run_id, apply);
      return accepted;
    },
    [workflowId, apply],
  );

  const cancel = useCallback(async () => {
    if (!run) return;
    unwrap(
      await api.POST("/api/v1/workflows/{workflow_id}/runs/{run_id}/cancel", {
        params: { path: { workflow_id: workflowId, run_id: run.runId } },
      }),
    );
  }, [run, workflowId]);

  const clear = useCallback(() => {
    stop.current?.();
    setRun(null);
    setLive({});
  }, []);

  return { run, live, start, cancel, clear };
}
