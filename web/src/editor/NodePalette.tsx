import { NOTE_TYPE } from "../graph/note";
import { useMemo, useState } from "react";
import type { NodeType } from "../api/types";
import {
  ALL_PACKAGES,
  filterByPackage,
  packageBadge,
  packageChoices,
  paletteNote,
} from "./packages";
import { paletteGroups } from "./paletteGroups";
import { searchNodeTypes } from "./search";

export const DRAG_TYPE = "application/x-nodeloom-node-type";

/** The node catalog, grouped by category, searchable (aliases included: "tts", "img") and
 * filtered by package; drag an item onto the canvas, or press it (Enter) to add it in the
 * middle of the view; Enter in the search adds the first match. What works here is listed
 * first (paletteGroups). A packaged type carries its package's badge; an unavailable one stays
 * focusable, greyed, with its reason, and cannot be added. On a narrow screen it is a drawer,
 * opened from the toolbar. */
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
  const [pkg, setPkg] = useState(ALL_PACKAGES);
  const choices = useMemo(() => packageChoices(types), [types]);
  const groups = useMemo(
    () => paletteGroups(searchNodeTypes(filterByPackage(types, pkg), query), !!query.trim()),
    [types, query, pkg],
  );
  // Enter in the search adds the first match that can be added.
  const first = groups.flatMap(([, items]) => items).find((t) => !paletteNote(t)?.blocked);
  return (
    <aside className="palette" id="editor-palette" aria-label="Node palette">
      <div className="drawer-head">
        <label htmlFor="palette-search">Add a node</label>
        <button type="button" className="drawer-close" onClick={onClose}>
          Close
        </button>
      </div>
      <button type="button" className="add-note" onClick={() => onAdd(NOTE_TYPE)}>
        Add a sticky note
      </button>
      <input
        id="palette-search"
        type="search"
        placeholder="Search nodes"
        value={query}
        onChange={(e) => setQuery(e.target.value)}
        onKeyDown={(e) => {
          if (e.key === "Enter" && query.trim() && first) {
            e.preventDefault();
            onAdd(first.type);
          }
        }}
        aria-describedby="palette-search-hint"
      />
      <div className="hint small muted" id="palette-search-hint">
        Enter adds the first match{query.trim() && first ? `: ${first.title}` : ""}.
      </div>
      <div className="palette-filter">
        <label htmlFor="palette-package">Package</label>
        <select id="palette-package" value={pkg} onChange={(e) => setPkg(e.target.value)}>
          {choices.map((c) => (
            <option key={c.value} value={c.value}>
              {c.label}
            </option>
          ))}
        </select>
      </div>
      {groups.map(([category, items]) => (
        <section key={category}>
          <h3>{category}</h3>
          {items.map((t) => {
            const note = paletteNote(t);
            const reason = note?.blocked ? note.text : null;
            const badge = packageBadge(t);
            const reasonId = `palette-reason-${t.type}`;
            return (
              <button
                type="button"
                key={t.type}
                className="palette-item"
                draggable={reason === null}
                aria-disabled={reason !== null || undefined}
                aria-describedby={note ? reasonId : undefined}
                title={note?.text ?? t.description}
                aria-label={`Add ${t.title}`}
                data-node-type={t.type}
                data-package={t.package?.name}
                onDragStart={(e) => {
                  if (reason) {
                    e.preventDefault();
                    return;
                  }
                  e.dataTransfer.setData(DRAG_TYPE, t.type);
                  e.dataTransfer.effectAllowed = "move";
                }}
                onClick={() => {
                  if (!reason) onAdd(t.type);
                }}
              >
                <span className="palette-name">
                  <span>{t.title}</span>
                  {badge && (
                    <span className="badge" title={t.package?.name}>
                      {badge}
                    </span>
                  )}
                  {note && (
                    <span className="palette-reason" id={reasonId}>
                      {note.text}
                    </span>
                  )}
                </span>
                <span className="cost">
                  {t.cost.credits}
                  {t.cost.per_second ? `+${t.cost.per_second}/s` : ""} cr
                </span>
              </button>
            );
          })}
        </section>
      ))}
      {groups.length === 0 && <p className="muted small">No node matches.</p>}
    </aside>
  );
}
