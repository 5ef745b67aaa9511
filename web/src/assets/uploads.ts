// The uploads under way in this tab, for the app-wide indicator and each page's own list:
// a tiny external store read with useSyncExternalStore.
import { useSyncExternalStore } from "react";
import { isResumable, uploadResumable } from "./resumable";
import { uploadFile, type UploadResult } from "./upload";

export interface UploadState {
  id: number;
  name: string;
  size: number;
  /** 0 to 1. */
  progress: number;
  error: string | null;
  done: boolean;
}

let uploads: UploadState[] = [];
let nextId = 1;
const listeners = new Set<() => void>();
/** The request of each upload under way, to cancel it (`cancelUpload`). */
const controllers = new Map<number, AbortController>();

function set(next: UploadState[]) {
  uploads = next;
  for (const listener of listeners) listener();
}

function update(id: number, change: Partial<UploadState>) {
  set(uploads.map((u) => (u.id === id ? { ...u, ...change } : u)));
}

/** Did an upload end because it was cancelled (`cancelUpload`)? Callers say nothing then. */
export function isCancelled(exc: unknown): boolean {
  return exc instanceof DOMException && exc.name === "AbortError";
}

/** Upload `file`, tracked in the store until it ends (a finished or cancelled one leaves
 * the list; a failed one stays, with its error, until dismissed). */
export async function startUpload(file: File): Promise<UploadResult> {
  const id = nextId++;
  const controller = new AbortController();
  controllers.set(id, controller);
  set([
    ...uploads,
    { id, name: file.name, size: file.size, progress: 0, error: null, done: false },
  ]);
  try {
    const send = isResumable(file) ? uploadResumable : uploadFile;
    const result = await send(file, (progress) => update(id, { progress }), controller.signal);
    set(uploads.filter((u) => u.id !== id));
    return result;
  } catch (exc) {
    if (isCancelled(exc)) set(uploads.filter((u) => u.id !== id));
    else update(id, { error: exc instanceof Error ? exc.message : String(exc), done: true });
    throw exc;
  } finally {
    controllers.delete(id);
  }
}

/** Stop an upload under way: its request is aborted (the server keeps nothing of what it
 * received and counts none of it) and it leaves the list. */
export function cancelUpload(id: number) {
  controllers.get(id)?.abort();
}

export function dismissUpload(id: number) {
  set(uploads.filter((u) => u.id !== id));
}

function subscribe(listener: () => void) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

/** The uploads as they are now (outside React). */
export function uploadsNow(): UploadState[] {
  return uploads;
}

export function useUploads(): UploadState[] {
  return useSyncExternalStore(subscribe, () => uploads);
}
