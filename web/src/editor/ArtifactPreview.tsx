import { useQuery } from "@tanstack/react-query";
import { api, sameOrigin, unwrap } from "../api/client";

/** An artifact shown as what it is: text, an image, an audio or a video player. Media load
 * from a signed URL (no Authorization header needed), which the server serves with Range, so
 * seeking works. */
export function ArtifactPreview({
  artifactId,
  compact = false,
}: {
  artifactId: string;
  compact?: boolean;
}) {
  const meta = useQuery({
    queryKey: ["artifact", artifactId],
    staleTime: 30 * 60 * 1000,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/artifacts/{artifact_id}/metadata", {
          params: { path: { artifact_id: artifactId } },
        }),
      ),
  });
  const url = meta.data ? sameOrigin(meta.data.download_url) : null;
  const isText = meta.data?.content_type === "text/plain";
  const text = useQuery({
    queryKey: ["artifact-text", artifactId],
    enabled: Boolean(url && isText),
    staleTime: Infinity,
    queryFn: async () => {
      const response = await fetch(url as string);
      const body = await response.text();
      return body.length > 4000 ? body.slice(0, 4000) + "…" : body;
    },
  });
  if (!meta.data || !url) return <span className="muted small">Loading output…</span>;
  const type = meta.data.content_type;
  return (
    <div className="preview">
      {type.startsWith("image/") && <img src={url} alt="Output image" loading="lazy" />}
      {type.startsWith("audio/") && (
        <audio controls preload="metadata" src={url} aria-label="Output audio" />
      )}
      {type.startsWith("video/") && (
        <video controls preload="auto" src={url} aria-label="Output video" playsInline />
      )}
      {isText && <pre>{text.data ?? "…"}</pre>}
      {!compact && (
        <a href={url} download className="small">
          Download ({(meta.data.size_bytes / 1024).toFixed(1)} KB, {type})
        </a>
      )}
    </div>
  );
}
