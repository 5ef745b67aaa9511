// What the gallery page knows without React: the list's address, and the next page's from
// the Link header the API answers (`<url>; rel="next"`), kept to its path so the page reads
// it from the origin it was served by.
import type { components } from "../api/schema";

export type Card = components["schemas"]["PublicAppCard"];

export const GALLERY_PAGE = 24;
export const FIRST_PAGE = `/api/v1/public/apps?limit=${GALLERY_PAGE}`;

/** The path and query of the Link header's ``rel="next"``, or null (the last page). */
export function nextPage(link: string | null): string | null {
  if (!link) return null;
  for (const part of link.split(",")) {
    const match = /^\s*<([^>]*)>\s*;\s*rel="?next"?\s*$/.exec(part);
    if (match?.[1]) {
      const url = new URL(match[1], "http://localhost");
      return url.pathname + url.search;
    }
  }
  return null;
}

/** The page a card links to, on this origin. */
export function cardPath(card: Pick<Card, "slug">): string {
  return `/apps/${encodeURIComponent(card.slug)}`;
}
