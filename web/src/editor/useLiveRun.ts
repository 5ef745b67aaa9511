import { useCallback, useMemo, useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { ApiError, api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { GraphJson, RunEstimate, Workflow } from "../api/types";
import { fromGraph, type FlowEdge, type FlowNode } from "../graph/convert";
import { staleNodeIds } from "../graph/outputs";
import { placeProblems } from "../graph/problems";
import type { Graph } from "./useGraph";
import type { Saver } from "./useSave";
import { useRun } from "./useRun";

/** Running the workflow from the editor: the run dialog's state (open, estimate, error), the
 * toolbar's run actions (each saves first when there are unsaved changes), the shown run's
 * live node states (useRun) and which of their outputs are stale. */
export function useLiveRun({
  workflow,
  loaded,
  graph,
  saver,
  notify,
}: {
  workflow: Workflow;
  /** The graph as opened: the newest run, shown on opening, is compared with it. */
  loaded: { nodes: FlowNode[]; edges: FlowEdge[] };
  graph: Graph;
  saver: Saver;
  notify: (message: string) => void;
}) {
  const runner = useRun(workflow.id);
  const { nodes, edges, nodesRef, edgesRef, dirty } = graph;
  const { save, setProblems, original } = saver;
  const [dialogOpen, setDialogOpen] = useState(false);
  const [estimate, setEstimate] = useState<RunEstimate | null>(null);
  const [error, setError] = useState<string | null>(null);
  // The graph the shown run was started from: the graph as opened (the newest run is shown on
  // opening), then the graph of each run started here. Outputs of nodes changed since, or
  // downstream of a change, are marked stale.
  const [ranGraph, setRanGraph] = useState(() => ({
    nodes: loaded.nodes,
    edges: loaded.edges,
    here: false,
  }));

  /** A refused run's problems go on their nodes; the reason is returned. */
  const failed = useCallback(
    (exc: unknown): string => {
      if (exc instanceof ApiError && exc.problem.errors?.length) {
        setProblems(placeProblems(exc.problem.errors, original.current));
      }
      const why = exc instanceof Error ? exc.message : String(exc);
      setError(why);
      return why;
    },
    [original, setProblems],
  );

  const openDialog = useCallback(async () => {
    if (dirty && !(await save())) return;
    setError(null);
    setEstimate(null);
    setDialogOpen(true);
    try {
      setEstimate(
        unwrap(
          await api.GET("/api/v1/workflows/{workflow_id}/estimate", {
            params: { path: { workflow_id: workflow.id } },
          }),
        ),
      );
    } catch (exc) {
      setError(exc instanceof Error ? exc.message : String(exc));
    }
  }, [dirty, save, workflow.id]);

  const start = useCallback(
    async (input: Record<string, unknown> | null, cache: boolean): Promise<string | null> => {
      try {
        await runner.start(
          nodesRef.current.map((n) => n.id),
          input,
          cache,
        );
        setRanGraph({ nodes: nodesRef.current, edges: edgesRef.current, here: true });
        setDialogOpen(false);
        return null;
      } catch (exc) {
        return failed(exc);
      }
    },
    [edgesRef, nodesRef, failed, runner],
  );

  /** "Run again" / "Run without cache": the input of the run shown, no dialog. */
  const runAgain = useCallback(
    async (cache: boolean) => {
      if (dirty && !(await save())) return;
      setError(null);
      const why = await start(runner.run?.input ?? null, cache);
      if (why) notify(`Not started: ${why}`);
    },
    [dirty, notify, runner.run, save, start],
  );

  /** "Retry with this version": the shown failed or cancelled run, retried with the
   * workflow as saved now (saved first), reusing what still matches. */
  const retryCurrent = useCallback(async () => {
    if (dirty && !(await save())) return;
    setError(null);
    try {
      await runner.retryCurrent(nodesRef.current.map((n) => n.id));
      setRanGraph({ nodes: nodesRef.current, edges: edgesRef.current, here: true });
    } catch (exc) {
      notify(`Not retried: ${failed(exc)}`);
    }
  }, [dirty, edgesRef, nodesRef, failed, notify, runner, save]);

  // The newest run shown on opening may be of an older version than the one opened: then its
  // own version's graph is the one to compare with (a version never changes: fetched once).
  const shownVersion = runner.run?.workflowVersion ?? null;
  const olderRun = !ranGraph.here && shownVersion !== null && shownVersion !== workflow.version;
  const olderGraph = useQuery({
    queryKey: keys.version(workflow.id, shownVersion ?? 0),
    enabled: olderRun,
    staleTime: Infinity,
    retry: false,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}/versions/{version}", {
          params: { path: { workflow_id: workflow.id, version: shownVersion ?? 0 } },
        }),
      ),
  });
  const stale = useMemo(() => {
    const ran =
      olderRun && olderGraph.data
        ? fromGraph(olderGraph.data.graph_json as unknown as GraphJson)
        : ranGraph;
    return staleNodeIds(ran, { nodes, edges });
  }, [olderRun, olderGraph.data, ranGraph, nodes, edges]);
  const cachedCount = Object.values(runner.live).filter(
    (n) => n.status === "completed" && n.cached,
  ).length;

  return {
    run: runner.run,
    live: runner.live,
    cancel: runner.cancel,
    stale,
    cachedCount,
    dialogOpen,
    closeDialog: () => setDialogOpen(false),
    estimate,
    error,
    openDialog,
    start,
    runAgain,
    retryCurrent,
  };
}
