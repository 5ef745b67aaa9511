// Pure helpers for the account's media: which input node takes an asset, the key a dropped
// file's node gets, the run dialog's media fields, and sizes as people read them.
import type { FlowNode } from "../graph/convert";

export type MediaKind = "image" | "audio" | "video";

export const INPUT_NODE: Record<MediaKind, string> = {
  image: "ImageInput",
  audio: "AudioInput",
  video: "VideoInput",
};

const KIND_OF_NODE = new Map(Object.entries(INPUT_NODE).map(([k, t]) => [t, k as MediaKind]));

/** The media kind an input node type takes (null for any other type). */
export function mediaKindOfNode(type: string | undefined): MediaKind | null {
  return (type && KIND_OF_NODE.get(type)) || null;
}

/** The run-input key a node made for a dropped file gets: its name without the extension, in
 * lower case, letters, digits and underscores only (a form field and a JSON key alike), and
 * different from every key the graph already reads. */
export function keyForFile(fileName: string, nodes: FlowNode[]): string {
  const stem = fileName.replace(/\.[^.]*$/, "");
  const base =
    stem
      .toLowerCase()
      .replace(/[^a-z0-9]+/g, "_")
      .replace(/^_+|_+$/g, "")
      .slice(0, 40) || "media";
  const taken = new Set(
    nodes.map((n) => (typeof n.data.key === "string" ? n.data.key : "")).filter(Boolean),
  );
  if (!taken.has(base)) return base;
  for (let i = 2; ; i++) if (!taken.has(`${base}_${i}`)) return `${base}_${i}`;
}

export interface MediaField {
  key: string;
  kind: MediaKind;
  /** The node's default asset: what the run uses when no other is chosen. */
  initial: string;
}

/** The media the run's input can bring: one field per key of an Image/Audio/VideoInput
 * node (the first such node's kind and default asset). Nodes without a key take only their
 * asset and get no field. */
export function mediaFields(nodes: FlowNode[]): MediaField[] {
  const seen = new Map<string, MediaField>();
  for (const node of nodes) {
    const kind = mediaKindOfNode(node.type);
    const key = typeof node.data.key === "string" ? node.data.key.trim() : "";
    if (!kind || !key || seen.has(key)) continue;
    const asset = typeof node.data.asset === "string" ? node.data.asset : "";
    seen.set(key, { key, kind, initial: asset });
  }
  return [...seen.values()];
}

/** The run's input: the text fields as typed, and each media key that names an asset (a
 * key left empty is left out, so its node falls back on its own asset). Null when there is
 * nothing to send. */
export function runInput(
  text: Record<string, string>,
  textKeys: string[],
  media: Record<string, string>,
  mediaKeys: string[],
): Record<string, string> | null {
  const input: Record<string, string> = {};
  for (const key of textKeys) input[key] = text[key] ?? "";
  for (const key of mediaKeys) if (media[key]) input[key] = media[key];
  return textKeys.length || Object.keys(input).length ? input : null;
}

/** Bytes as people read them: 1023 B, 1.5 KB, 12.0 MB, 1.00 GB. */
export function formatBytes(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ["KB", "MB", "GB", "TB"];
  let value = bytes / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(unit >= 2 ? 2 : 1)} ${units[unit]}`;
}

/** The share of the quota used, 0 to 100, for a meter. */
export function quotaPercent(used: number, quota: number): number {
  if (quota <= 0) return 100;
  return Math.min(100, Math.round((used / quota) * 1000) / 10);
}
