import { useEffect, useState } from "react";
import { cardPath, FIRST_PAGE, nextPage, type Card } from "./gallery";

type Page = { cards: Card[]; next: string | null };

/** The public apps of this server (``/gallery``), newest first, a page at a time. Part of
 * the visitor's small entry: no account, no editor code. */
export function Gallery() {
  const [page, setPage] = useState<Page | null>(null);
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);

  async function load(path: string, before: Card[]) {
    setBusy(true);
    try {
      const r = await fetch(path);
      if (!r.ok) return setError(`The list could not be read (HTTP ${r.status}).`);
      const cards = (await r.json()) as Card[];
      setPage({ cards: [...before, ...cards], next: nextPage(r.headers.get("Link")) });
    } catch {
      setError("The server could not be reached.");
    } finally {
      setBusy(false);
    }
  }

  useEffect(() => {
    document.title = "Apps";
    void load(FIRST_PAGE, []);
  }, []);

  return (
    <main className="app-page">
      <h1>Apps</h1>
      {error && (
        <p role="alert" className="app-error">
          {error}
        </p>
      )}
      {!page && !error && <p>Loading…</p>}
      {page && page.cards.length === 0 && <p>No public apps yet.</p>}
      {page && page.cards.length > 0 && (
        <ul className="app-gallery">
          {page.cards.map((card) => (
            <li key={card.slug}>
              <a href={cardPath(card)}>
                {card.cover_url && <img src={card.cover_url} alt="" loading="lazy" />}
                <strong>{card.title}</strong>
              </a>
              {card.description && <p className="app-description">{card.description}</p>}
              {card.password_required && <p className="app-muted">Needs a password</p>}
            </li>
          ))}
        </ul>
      )}
      {page?.next && (
        <button type="button" disabled={busy} onClick={() => void load(page.next!, page.cards)}>
          More apps
        </button>
      )}
    </main>
  );
}
