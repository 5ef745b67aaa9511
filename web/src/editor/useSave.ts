import { useCallback, useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { useReactFlow } from "@xyflow/react";
import { ApiError, api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import type { GraphJson, SavedWorkflow, Warning, Workflow } from "../api/types";
import { toGraph, type FlowEdge, type FlowNode } from "../graph/convert";
import { placeProblems, type Placed } from "../graph/problems";
import type { Graph } from "./useGraph";

export type Banner = { kind: "ok" | "error" | "warn"; text: string };

export function warningText(count: number, general: string[], opening = false): string {
  const plural = `${count} warning${count === 1 ? "" : "s"}`;
  return `${opening ? `This workflow has ${plural}` : `Saved with ${plural}`}, shown on the nodes they concern. ${
    general.length ? general.join(" ") + " " : ""
  }Running is refused until they are resolved.`;
}

/** The version a 412 answer names: the one saved since, else the next one. */
function versionSince(exc: ApiError, held: number): number {
  const now = (exc.problem as { current_version?: unknown }).current_version;
  return typeof now === "number" ? now : held + 1;
}

/** Saving the graph and moving between its versions: the version held (sent as If-Match, so a
 * save never overwrites another tab's or person's save unseen; a 412 sets ``conflict`` to the
 * version saved since), the banner that says how the last save or restore went, and the
 * problems and warnings the server placed on nodes and edges. ``opening`` is what is said when
 * the editor opens: a note (after a restore), else the warnings the graph has. */
export function useSave({
  workflow,
  graph,
  name,
  original: loadedGraph,
  opening,
  onNote,
}: {
  workflow: Workflow;
  graph: Graph;
  name: string;
  /** The graph as loaded: what the canvas cannot show (unknown fields) is kept from it. */
  original: GraphJson;
  opening: { note: string | null; warnings: Warning[]; fromServer?: boolean };
  onNote: (note: string | null) => void;
}) {
  const client = useQueryClient();
  const rf = useReactFlow<FlowNode, FlowEdge>();
  const { nodesRef, edgesRef, setDirty } = graph;
  const original = useRef<GraphJson>(loadedGraph);
  const [saving, setSaving] = useState(false);
  const [version, setVersion] = useState(workflow.version);
  const [conflict, setConflict] = useState<number | null>(null);
  const [restoring, setRestoring] = useState(false);
  const [problems, setProblems] = useState<Placed | null>(null);
  const [warnings, setWarnings] = useState<Placed | null>(() =>
    opening.warnings.length ? placeProblems(opening.warnings, loadedGraph) : null,
  );
  const [banner, setBanner] = useState<Banner | null>(() =>
    opening.note
      ? { kind: "ok", text: opening.note }
      : opening.warnings.length
        ? {
            kind: "warn",
            text: warningText(
              opening.warnings.length,
              placeProblems(opening.warnings, loadedGraph).general,
              opening.fromServer,
            ),
          }
        : null,
  );

  const save = useCallback(async (): Promise<boolean> => {
    const sent = toGraph(nodesRef.current, edgesRef.current, rf.getViewport(), original.current);
    setSaving(true);
    setBanner(null);
    try {
      const saved: SavedWorkflow = unwrap(
        await api.PATCH("/api/v1/workflows/{workflow_id}", {
          params: {
            path: { workflow_id: workflow.id },
            header: { "If-Match": `"v${version}"` },
          },
          body: { name: name.trim() || workflow.name, graph_json: sent } as never,
        }),
      );
      original.current = saved.graph_json as unknown as GraphJson;
      setVersion(saved.version);
      setConflict(null);
      setProblems(null);
      setDirty(false);
      // Accepted, with things to say (a node type this server cannot run): shown on their
      // nodes, amber, without blocking the save. The pointers name the graph just sent.
      const found = saved.warnings ?? [];
      const placedWarnings = found.length ? placeProblems(found, sent) : null;
      setWarnings(placedWarnings);
      setBanner(
        placedWarnings
          ? { kind: "warn", text: warningText(found.length, placedWarnings.general) }
          : { kind: "ok", text: "Saved." },
      );
      void client.invalidateQueries({ queryKey: keys.workflows });
      return true;
    } catch (exc) {
      if (exc instanceof ApiError && exc.status === 412) {
        setConflict(versionSince(exc, version));
        return false;
      }
      if (exc instanceof ApiError && exc.problem.errors?.length) {
        const placed = placeProblems(exc.problem.errors, sent);
        setProblems(placed);
        const count = exc.problem.errors.length;
        setBanner({
          kind: "error",
          text: `Not saved: ${count} problem${count === 1 ? "" : "s"}, shown on the nodes and edges they concern.${
            placed.general.length ? " " + placed.general.join(" ") : ""
          }`,
        });
      } else {
        setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
      }
      return false;
    } finally {
      setSaving(false);
    }
  }, [client, edgesRef, name, nodesRef, rf, setDirty, version, workflow.id, workflow.name]);

  /** The workflow as saved now, opened afresh (what this editor holds is dropped). */
  const reload = useCallback(async () => {
    try {
      const fresh = unwrap(
        await api.GET("/api/v1/workflows/{workflow_id}", {
          params: { path: { workflow_id: workflow.id } },
        }),
      );
      client.setQueryData(keys.workflow(workflow.id), fresh);
    } catch (exc) {
      setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
    }
  }, [client, workflow.id]);

  /** Restore version ``n`` as a new version, then open it. */
  const restoreVersion = useCallback(
    async (n: number) => {
      setRestoring(true);
      try {
        const restored = unwrap(
          await api.POST("/api/v1/workflows/{workflow_id}/versions/{version}/restore", {
            params: {
              path: { workflow_id: workflow.id, version: n },
              header: { "If-Match": `"v${version}"` },
            },
            body: {} as never,
          }),
        );
        onNote(`Restored version ${n}: it is now version ${restored.version}.`);
        void client.invalidateQueries({ queryKey: keys.workflows });
        client.setQueryData(keys.workflow(workflow.id), restored);
      } catch (exc) {
        if (exc instanceof ApiError && exc.status === 412) {
          setConflict(versionSince(exc, version));
        } else if (exc instanceof ApiError && exc.problem.errors?.length) {
          setBanner({
            kind: "error",
            text: `Version ${n} cannot be restored here: ${exc.problem.errors
              .map((e) => e.message)
              .join("; ")}`,
          });
        } else {
          setBanner({ kind: "error", text: exc instanceof Error ? exc.message : String(exc) });
        }
      } finally {
        setRestoring(false);
      }
    },
    [client, onNote, version, workflow.id],
  );

  return {
    save,
    saving,
    reload,
    restoreVersion,
    restoring,
    version,
    conflict,
    banner,
    problems,
    setProblems,
    warnings,
    /** The graph as last saved (or loaded): a refused run's problems point into it. */
    original,
  };
}

export type Saver = ReturnType<typeof useSave>;
