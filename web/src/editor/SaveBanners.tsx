import type { Banner } from "./useSave";

/** Under the toolbar: a save refused because the workflow was saved elsewhere since (with the
 * way out), and how the last save, restore or opening went. */
export function SaveBanners({
  conflict,
  banner,
  dirty,
  onReload,
}: {
  /** The version saved elsewhere, when the last save or restore was refused for it. */
  conflict: number | null;
  banner: Banner | null;
  dirty: boolean;
  onReload: () => void;
}) {
  return (
    <>
      {conflict !== null && (
        <div
          className="banner error"
          role="alert"
          data-testid="save-conflict"
          style={{ margin: 8 }}
        >
          Not saved: this workflow was saved elsewhere (another tab or person) since you opened it;
          version {conflict} is the current one now. Reload to open that version (the changes made
          here are dropped), or keep editing here and copy what you need first.{" "}
          <button type="button" className="primary" onClick={onReload}>
            Reload version {conflict}
          </button>
        </div>
      )}
      {/* "Saved." is about the graph as it was saved: gone at the next change, so it never
          stands beside "Unsaved changes". */}
      {banner && !(banner.kind === "ok" && dirty) && (
        <div
          className={`banner ${banner.kind}`}
          role={banner.kind === "error" ? "alert" : "status"}
          data-testid="editor-banner"
          style={{ margin: 8 }}
        >
          {banner.text}
        </div>
      )}
    </>
  );
}
