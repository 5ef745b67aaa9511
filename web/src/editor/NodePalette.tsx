import { useMemo, useState } from "react";
import type { NodeType } from "../api/types";

export const DRAG_TYPE = "application/x-nodeloom-node-type";

/** The node catalog, grouped by category and searchable; drag an item onto the canvas, or
 * press it (Enter) to add it in the middle of the view. */
export function NodePalette({
  types,
  onAdd,
}: {
  types: NodeType[];
  onAdd: (type: string) => void;
}) {
  const [query, setQuery] = useState("");
  const groups = useMemo(() => {
    const q = query.trim().toLowerCase();
    const shown = types.filter(
      (t) => !q || `${t.title} ${t.type} ${t.description} ${t.category}`.toLowerCase().includes(q),
    );
    const byCategory = new Map<string, NodeType[]>();
    for (const t of shown) byCategory.set(t.category, [...(byCategory.get(t.category) ?? []), t]);
    return [...byCategory.entries()].sort(([a], [b]) => a.localeCompare(b));
  }, [types, query]);
  return (
    <aside className="palette" aria-label="Node palette">
      <label htmlFor="palette-search">Add a node</label>
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
