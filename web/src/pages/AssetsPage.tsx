import { useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { ApiError, api, sameOrigin, unwrap } from "../api/client";
import { keys, useAssets, useStorage } from "../api/queries";
import type { Asset } from "../api/types";
import { formatBytes, quotaPercent } from "../assets/media";
import { startUpload } from "../assets/uploads";
import { UploadList } from "../assets/UploadList";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBanner, messageOf } from "../components/forms";
import { formatTime } from "../components/Status";

function describe(asset: Asset): string {
  const parts: string[] = [];
  if (asset.width && asset.height) parts.push(`${asset.width}×${asset.height}`);
  if (asset.duration_ms) parts.push(`${(asset.duration_ms / 1000).toFixed(1)} s`);
  parts.push(formatBytes(asset.size_bytes));
  return parts.join(" · ");
}

function AssetPreview({ asset }: { asset: Asset }) {
  const content = sameOrigin(asset.download_url);
  if (asset.kind === "audio") {
    return <audio controls preload="none" src={content} aria-label={`Play ${asset.name}`} />;
  }
  if (asset.kind === "video") {
    return (
      <video
        controls
        preload="none"
        src={content}
        poster={asset.thumbnail_url ? sameOrigin(asset.thumbnail_url) : undefined}
        aria-label={`Play ${asset.name}`}
        playsInline
      />
    );
  }
  return asset.thumbnail_url ? (
    <img src={sameOrigin(asset.thumbnail_url)} alt={asset.name} loading="lazy" />
  ) : null;
}

/** The account's uploaded media: a grid with thumbnails and players, upload by button or
 * by dropping files on the page (progress per file), delete, and the storage quota. */
export function AssetsPage() {
  const client = useQueryClient();
  const [kind, setKind] = useState<"" | "image" | "audio" | "video">("");
  const assets = useAssets(kind || undefined);
  const storage = useStorage();
  const [error, setError] = useState<string | null>(null);
  const [notice, setNotice] = useState<string | null>(null);
  const [over, setOver] = useState(false);
  const [deleting, setDeleting] = useState<{ asset: Asset; inUse: string[] | null } | null>(null);
  const input = useRef<HTMLInputElement>(null);

  const refresh = async () => {
    await client.invalidateQueries({ queryKey: ["assets"] });
    await client.invalidateQueries({ queryKey: keys.storage });
  };

  const upload = async (files: File[]) => {
    setError(null);
    setNotice(null);
    const results = await Promise.allSettled(files.map((f) => startUpload(f)));
    await refresh();
    const kept = results.filter(
      (r): r is PromiseFulfilledResult<Awaited<ReturnType<typeof startUpload>>> =>
        r.status === "fulfilled",
    );
    const already = kept.filter((r) => !r.value.created).map((r) => r.value.asset.name);
    if (already.length) setNotice(`Already in your assets: ${already.join(", ")}.`);
  };

  const remove = async (asset: Asset, force: boolean) => {
    try {
      unwrap(
        await api.DELETE("/api/v1/assets/{asset_id}", {
          params: { path: { asset_id: asset.id }, query: force ? { force: true } : {} },
        }),
      );
      setDeleting(null);
      await refresh();
    } catch (exc) {
      if (exc instanceof ApiError && exc.problem.code === "asset_in_use") {
        const workflows = (exc.problem as { workflows?: string[] }).workflows;
        setDeleting({ asset, inUse: workflows ?? [] });
        return;
      }
      setDeleting(null);
      setError(messageOf(exc));
    }
  };

  const used = storage.data?.used_bytes ?? 0;
  const quota = storage.data?.quota_bytes ?? 0;
  return (
    <main
      className={`page assets-page${over ? " drop-over" : ""}`}
      onDragOver={(e) => {
        if (e.dataTransfer.types.includes("Files")) {
          e.preventDefault();
          e.dataTransfer.dropEffect = "copy";
          setOver(true);
        }
      }}
      onDragLeave={(e) => {
        if (e.currentTarget === e.target) setOver(false);
      }}
      onDrop={(e) => {
        if (!e.dataTransfer.files.length) return;
        e.preventDefault();
        setOver(false);
        void upload([...e.dataTransfer.files]);
      }}
    >
      <div className="row" style={{ justifyContent: "space-between", alignItems: "center" }}>
        <h1>Assets</h1>
        {storage.data && (
          <div className="quota" data-testid="storage">
            <meter min={0} max={100} value={quotaPercent(used, quota)} aria-label="Storage used" />
            <span className="small">
              {formatBytes(used)} of {formatBytes(quota)} used · files up to{" "}
              {formatBytes(storage.data.file_bytes)}
            </span>
          </div>
        )}
      </div>
      <p className="muted small">
        Images, audio and video for your workflows' Image, Audio and Video inputs. Drop files
        anywhere on this page, or on the editor's canvas to add an input node for each.
      </p>
      <div className="row">
        <button type="button" className="primary" onClick={() => input.current?.click()}>
          Upload files
        </button>
        <input
          ref={input}
          type="file"
          multiple
          hidden
          aria-label="Files to upload"
          accept="image/*,audio/*,video/*"
          onChange={(e) => {
            const files = [...(e.target.files ?? [])];
            e.target.value = "";
            if (files.length) void upload(files);
          }}
        />
        <label className="row small">
          Show
          <select value={kind} onChange={(e) => setKind(e.target.value as typeof kind)}>
            <option value="">all kinds</option>
            <option value="image">images</option>
            <option value="audio">audio</option>
            <option value="video">videos</option>
          </select>
        </label>
      </div>
      <UploadList />
      <ErrorBanner error={error} />
      {notice && (
        <div className="banner ok" role="status">
          {notice}
        </div>
      )}
      {assets.isPending && <p>Loading…</p>}
      {assets.data && assets.data.length === 0 && (
        <p className="muted">No assets yet: upload a photo, a voice memo or a video.</p>
      )}
      <ul className="asset-grid" aria-label="Assets">
        {(assets.data ?? []).map((asset) => (
          <li key={asset.id} className="asset-card" data-asset-id={asset.id}>
            <div className="asset-preview">
              <AssetPreview asset={asset} />
            </div>
            <div className="asset-name" title={asset.name}>
              {asset.name}
            </div>
            <div className="muted small">
              {asset.kind} · {describe(asset)}
            </div>
            <div className="muted small">{formatTime(asset.created_at)}</div>
            <div className="row">
              <a className="small" href={sameOrigin(asset.download_url)} download={asset.name}>
                Download
              </a>
              <button
                type="button"
                className="danger small"
                aria-label={`Delete ${asset.name}`}
                onClick={() => setDeleting({ asset, inUse: null })}
              >
                Delete
              </button>
            </div>
          </li>
        ))}
      </ul>
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete ${deleting?.asset.name ?? ""}?`}
        confirmLabel={deleting?.inUse ? "Delete anyway" : "Delete"}
        onConfirm={() => deleting && void remove(deleting.asset, deleting.inUse !== null)}
        onCancel={() => setDeleting(null)}
      >
        {deleting?.inUse ? (
          <p role="alert">
            {deleting.inUse.length === 1
              ? "A workflow uses"
              : `${deleting.inUse.length} workflows use`}{" "}
            it as the default of an input node: their runs that bring no other file will fail.
          </p>
        ) : (
          <p>Its storage is given back at once. Runs that already used it keep their outputs.</p>
        )}
      </ConfirmDialog>
    </main>
  );
}
