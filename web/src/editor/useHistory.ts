import { useCallback, useRef, useState } from "react";
import type { FlowEdge, FlowNode } from "../graph/convert";

interface Snapshot {
  nodes: FlowNode[];
  edges: FlowEdge[];
}

const LIMIT = 100;

/** Undo and redo over whole-graph snapshots. ``record`` is called before each change; a
 * run of changes with the same tag (typing into one field) is one step. */
export function useHistory(current: () => Snapshot, restore: (snapshot: Snapshot) => void) {
  const past = useRef<Snapshot[]>([]);
  const future = useRef<Snapshot[]>([]);
  const lastTag = useRef<string | null>(null);
  const [, setVersion] = useState(0);
  const bump = () => setVersion((v) => v + 1);

  const record = useCallback(
    (tag: string | null = null) => {
      if (tag !== null && tag === lastTag.current) return;
      const now = current();
      const last = past.current[past.current.length - 1];
      // One user action can report several changes (a node removed with its edges).
      if (last && last.nodes === now.nodes && last.edges === now.edges) return;
      lastTag.current = tag;
      past.current = [...past.current.slice(-LIMIT + 1), now];
      future.current = [];
      bump();
    },
    [current],
  );

  const undo = useCallback(() => {
    const previous = past.current.pop();
    if (!previous) return;
    future.current.push(current());
    lastTag.current = null;
    restore(previous);
    bump();
  }, [current, restore]);

  const redo = useCallback(() => {
    const next = future.current.pop();
    if (!next) return;
    past.current.push(current());
    lastTag.current = null;
    restore(next);
    bump();
  }, [current, restore]);

  return {
    record,
    undo,
    redo,
    canUndo: past.current.length > 0,
    canRedo: future.current.length > 0,
  };
}
