import { createContext, useContext } from "react";
import type { NodeType } from "../api/types";
import type { Placed } from "../graph/problems";

/** What a node shows while a run goes on: its state, progress, output and error. */
export interface NodeLive {
  status: "queued" | "running" | "completed" | "failed" | "skipped" | "cancelled";
  progress?: number;
  cached?: boolean;
  artifactId?: string | null;
  error?: string | null;
}

export interface EditorState {
  catalog: Map<string, NodeType>;
  live: Record<string, NodeLive>;
  problems: Placed | null;
}

export const EditorContext = createContext<EditorState>({
  catalog: new Map(),
  live: {},
  problems: null,
});

export function useEditor(): EditorState {
  return useContext(EditorContext);
}
