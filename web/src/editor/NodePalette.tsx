import { useMemo, useState } from "react";
import type { NodeType } from "../api/types";
import { searchNodeTypes } from "./search";

export const DRAG_TYPE = "application/x-nodeloom-node-type";

/** The node catalog, grouped by category and searchable (aliases included: "tts", "img");
 * drag an item onto the canvas, or press it (Enter) to add it in the middle of the view. On a
 * narrow screen it is a drawer, opened from the toolbar. */
export function NodePalette({
  types,
  onAdd,
  onClose,
}: {
  types: NodeType[];
  onAdd: (type: string) => void;
  onClose: () => void;
}) {
  const [query, setQuery] = useState("");
  const groups = useMemo(() => {
    const shown = searchNodeTypes(types, query);
    const byCategory = new Map<string, NodeType[]>();
    for (const t of shown) byCategory.set(t.category, [...(byCategory.get(t.category) ?? []), t]);
    // Searching: the category of the best match first; browsing: alphabetical.
    const entries = [...byCategory.entries()];
    return query.trim() ? entries : entries.sort(([a], [b]) => a.localeCompare(b));
  }, [types, query]);
  return (
    <aside className="palette" id="editor-palette" aria-label="Node palette">
      <div className="drawer-head">
        <label htmlFor="palette-search">Add a node</label>
        <button type="button" className="drawer-close" onClick={onClose}>
          Close
        </button>
      </div>
      <input
        id="palette-search"
        type="search"
        placeholder="Search nodes"
        value={query}
        onChange={(e) => setQuery(e.target.value)}
      />
      {groups.map(([category, items]) => (
        <section key={category}>
          <h3>{category}</h3>
          {items.map((t) => (
            <button
              type="button"
              key={t.type}
              className="palette-item"
              draggable
              disabled={!t.available}
              title={t.available ? t.description : (t.unavailable_reason ?? "unavailable")}
              aria-label={`Add ${t.title}`}
              data-node-type={t.type}
              onDragStart={(e) => {
                e.dataTransfer.setData(DRAG_TYPE, t.type);
                e.dataTransfer.effectAllowed = "move";
              }}
              onClick={() => onAdd(t.type)}
            >
              <span>{t.title}</span>
              <span className="cost">
                {t.cost.credits}
                {t.cost.per_second ? `+${t.cost.per_second}/s` : ""} cr
              </span>
            </button>
          ))}
        </section>
      ))}
      {groups.length === 0 && <p className="muted small">No node matches.</p>}
    </aside>
  );
}
