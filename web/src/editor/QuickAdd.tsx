import { useEffect, useId, useMemo, useRef, useState } from "react";
import type { NodeType } from "../api/types";
import { paletteNote } from "./packages";
import { searchNodeTypes } from "./search";

/** The on-canvas quick-add menu: opened by a double-click on the empty canvas or by dropping
 * a dragged connection there. Type to search (aliases included); Enter adds the first match,
 * Escape closes. */
export function QuickAdd({
  types,
  at,
  connecting,
  onPick,
  onClose,
}: {
  /** The types that may be added here (when connecting: those that fit the handle). */
  types: NodeType[];
  /** Where it opens, in pixels from the canvas's top left corner. */
  at: { left: number; top: number };
  connecting: boolean;
  onPick: (type: string) => void;
  onClose: () => void;
}) {
  const [query, setQuery] = useState("");
  const input = useRef<HTMLInputElement>(null);
  const id = useId();
  const shown = useMemo(
    () =>
      searchNodeTypes(types, query)
        .filter((t) => !paletteNote(t)?.blocked)
        .slice(0, 8),
    [types, query],
  );
  useEffect(() => input.current?.focus(), []);
  return (
    <div
      className="quick-add"
      role="dialog"
      aria-label="Add a node here"
      style={{ left: at.left, top: at.top }}
      onKeyDown={(e) => {
        if (e.key === "Escape") {
          e.stopPropagation();
          onClose();
        }
      }}
      onBlur={(e) => {
        if (!e.currentTarget.contains(e.relatedTarget as Node | null)) onClose();
      }}
    >
      <label htmlFor={`${id}-q`} className="small">
        {connecting ? "Add a connected node" : "Add a node here"}
      </label>
      <input
        ref={input}
        id={`${id}-q`}
        type="search"
        placeholder="Search, e.g. tts, img, wait"
        value={query}
        onChange={(e) => setQuery(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && shown[0]) {
            e.preventDefault();
            onPick(shown[0].type);
          }
        }}
      />
      <ul aria-label="Matching nodes">
        {shown.map((t) => (
          <li key={t.type}>
            <button type="button" onClick={() => onPick(t.type)} data-node-type={t.type}>
              {t.title} <span className="muted small">{t.category}</span>
            </button>
          </li>
        ))}
      </ul>
      {shown.length === 0 && <p className="muted small">No node fits.</p>}
    </div>
  );
}
