import { createContext, useContext } from "react";
import type { NodeType } from "../api/types";
import type { Placed } from "../graph/problems";
import type { NodeLive } from "../events/runEvents";

export type { NodeLive };

export interface EditorState {
  catalog: Map<string, NodeType>;
  live: Record<string, NodeLive>;
  /** Problems of the last refused save or run, placed on their nodes and edges. */
  problems: Placed | null;
  /** Warnings of the last accepted save, placed the same way (shown amber, not blocking). */
  warnings: Placed | null;
  /** While a connection is dragged: the handles it may not end on, as `${nodeId}:${handleId}`. */
  refused: ReadonlySet<string>;
  /** Nodes whose shown output predates an edit of them or of a node upstream (staleNodeIds). */
  stale: ReadonlySet<string>;
  /** Nodes of Repeat regions, with their Repeat's max_iterations (graph/repeat.ts). */
  repeats: ReadonlyMap<string, number>;
  /** Names a node (data.label); "" removes its name. */
  rename: (nodeId: string, label: string) => void;
  /** Sets a sticky note's text. */
  editNote: (nodeId: string, text: string) => void;
  /** Removes a group, keeping its members where they are on the canvas. */
  ungroup: (groupId: string) => void;
}

export const EditorContext = createContext<EditorState>({
  catalog: new Map(),
  live: {},
  problems: null,
  warnings: null,
  refused: new Set(),
  stale: new Set(),
  repeats: new Map(),
  rename: () => undefined,
  editNote: () => undefined,
  ungroup: () => undefined,
});

export function useEditor(): EditorState {
  return useContext(EditorContext);
}
