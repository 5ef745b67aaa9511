import { cancelUpload, dismissUpload, useUploads } from "./uploads";
import { formatBytes } from "./media";

/** The uploads under way in this tab, each with its progress and a button to cancel it,
 * and the failed ones with their reason until dismissed. */
export function UploadList({ compact = false }: { compact?: boolean }) {
  const uploads = useUploads();
  if (!uploads.length) return null;
  return (
    <ul className={`upload-list${compact ? " compact" : ""}`} aria-label="Uploads">
      {uploads.map((u) => (
        <li key={u.id} className={u.error ? "failed" : undefined}>
          <span className="upload-name">{u.name}</span>{" "}
          <span className="muted small">{formatBytes(u.size)}</span>{" "}
          {u.error ? (
            <>
              <span role="alert" className="small">
                Not uploaded: {u.error}
              </span>{" "}
              <button type="button" className="small" onClick={() => dismissUpload(u.id)}>
                Dismiss
              </button>
            </>
          ) : (
            <>
              <progress
                max={1}
                value={u.progress}
                aria-label={`Uploading ${u.name}`}
                title={`${Math.round(u.progress * 100)}%`}
              />{" "}
              <button
                type="button"
                className="small"
                aria-label={`Cancel uploading ${u.name}`}
                onClick={() => cancelUpload(u.id)}
              >
                Cancel
              </button>
            </>
          )}
        </li>
      ))}
    </ul>
  );
}

/** The top bar's indicator: how many uploads are under way in this tab and how far along
 * they are together, whatever page started them. */
export function UploadIndicator() {
  const active = useUploads().filter((u) => !u.done);
  if (!active.length) return null;
  const total = active.reduce((sum, u) => sum + u.size, 0);
  const sent = active.reduce((sum, u) => sum + u.size * u.progress, 0);
  const share = total ? sent / total : 0;
  return (
    <span className="small upload-indicator" role="status" data-testid="upload-indicator">
      Uploading {active.length} file{active.length === 1 ? "" : "s"}{" "}
      <progress max={1} value={share} aria-label="Upload progress" /> {Math.round(share * 100)}%
    </span>
  );
}
