import type { NodeType } from "../api/types";
import { paletteNote } from "./packages";

/** How ready a type is to add: 0 works as it is, 1 needs one of the user's credentials
 * (no default provider here), 2 cannot run on this server. */
function readiness(type: NodeType): number {
  const note = paletteNote(type);
  return note === null ? 0 : note.blocked ? 2 : 1;
}

/**
 * The palette's sections. Browsing, what works here comes first: within a category the
 * types that work as they are, then those that need a credential, then those this server
 * cannot run; categories by how many of their types need something (the hosted-model
 * category, most of whose nodes need a provider, opened the palette with 18 of them), then
 * by name. Searching keeps the search's order: the category of the best match first.
 */
export function paletteGroups(
  shown: readonly NodeType[],
  searching: boolean,
): [string, NodeType[]][] {
  const byCategory = new Map<string, NodeType[]>();
  for (const t of shown) byCategory.set(t.category, [...(byCategory.get(t.category) ?? []), t]);
  const entries = [...byCategory.entries()];
  if (searching) return entries;
  const needing = (items: NodeType[]) =>
    items.filter((t) => readiness(t) > 0).length / Math.max(items.length, 1);
  return entries
    .map(([category, items]): [string, NodeType[]] => [
      category,
      [...items].sort((a, b) => readiness(a) - readiness(b)),
    ])
    .sort(([a, ai], [b, bi]) => needing(ai) - needing(bi) || a.localeCompare(b));
}
