import { useRef, useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { useAssets } from "../api/queries";
import type { MediaField } from "../assets/media";
import { isCancelled, startUpload } from "../assets/uploads";
import { messageOf } from "../components/forms";

const ACCEPT = { image: "image/*", audio: "audio/*", video: "video/*" };

/** The run dialog's field for a media input: one of the account's assets of the field's kind
 * (the node's default first), or a file uploaded here, which is then chosen. */
export function MediaPicker({
  field,
  value,
  onChange,
  enabled,
}: {
  field: MediaField;
  value: string;
  onChange: (assetId: string) => void;
  enabled: boolean;
}) {
  const client = useQueryClient();
  const assets = useAssets(field.kind, enabled);
  const input = useRef<HTMLInputElement>(null);
  const [progress, setProgress] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const id = `run-input-${field.key}`;
  const known = new Set((assets.data ?? []).map((a) => a.id));

  const upload = async (file: File) => {
    setError(null);
    setProgress(`Uploading ${file.name}…`);
    try {
      const { asset } = await startUpload(file);
      await client.invalidateQueries({ queryKey: ["assets"] });
      if (asset.kind !== field.kind) {
        setError(`${file.name} was read as ${asset.kind}: this input takes ${field.kind}.`);
      } else {
        onChange(asset.id);
      }
    } catch (exc) {
      if (!isCancelled(exc)) setError(messageOf(exc));
    } finally {
      setProgress(null);
    }
  };

  return (
    <div className="field media-field">
      <label htmlFor={id}>
        Input “{field.key}” ({field.kind})
      </label>
      <div className="row">
        <select id={id} value={value} onChange={(e) => onChange(e.target.value)}>
          <option value="">
            {field.initial ? "The node's own asset" : `Choose a file (${field.kind})…`}
          </option>
          {value && !known.has(value) && !assets.isPending && (
            <option value={value}>Missing asset ({value.slice(0, 8)}…)</option>
          )}
          {(assets.data ?? []).map((asset) => (
            <option key={asset.id} value={asset.id}>
              {asset.name}
              {asset.id === field.initial ? " (the node's default)" : ""}
            </option>
          ))}
        </select>
        <button type="button" onClick={() => input.current?.click()} disabled={progress !== null}>
          Upload…
        </button>
        <input
          ref={input}
          type="file"
          hidden
          accept={ACCEPT[field.kind]}
          aria-label={`File for input ${field.key}`}
          onChange={(e) => {
            const file = e.target.files?.[0];
            e.target.value = "";
            if (file) void upload(file);
          }}
        />
      </div>
      {progress && (
        <p className="small muted" role="status">
          {progress}
        </p>
      )}
      {error && (
        <p className="small banner error" role="alert">
          {error}
        </p>
      )}
    </div>
  );
}
