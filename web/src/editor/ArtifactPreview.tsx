import { useState } from "react";
import { useQuery } from "@tanstack/react-query";
import { isLongText } from "../graph/outputs";
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
      {isText && !compact && text.data !== undefined && isLongText(text.data) ? (
        <LongText text={text.data} />
      ) : (
        isText && <pre>{text.data ?? "…"}</pre>
      )}
      {!compact && (
        <a href={url} download className="small">
          Download ({(meta.data.size_bytes / 1024).toFixed(1)} KB, {type})
        </a>
      )}
    </div>
  );
}

/** A long text output, folded to its first lines with a control that shows it all. */
function LongText({ text }: { text: string }) {
  const [expanded, setExpanded] = useState(false);
  return (
    <>
      <pre className={expanded ? "long-text" : "long-text folded"}>{text}</pre>
      <button
        type="button"
        className="small"
        aria-expanded={expanded}
        onClick={() => setExpanded(!expanded)}
      >
        {expanded ? "Collapse" : `Expand (${text.length.toLocaleString()} characters)`}
      </button>
    </>
  );
}
