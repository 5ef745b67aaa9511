// The uploads under way in this tab, for the app-wide indicator and each page's own list:
// a tiny external store read with useSyncExternalStore.
import { useSyncExternalStore } from "react";
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

function set(next: UploadState[]) {
  uploads = next;
  for (const listener of listeners) listener();
}

function update(id: number, change: Partial<UploadState>) {
  set(uploads.map((u) => (u.id === id ? { ...u, ...change } : u)));
}

/** Upload `file`, tracked in the store until it ends (a finished one leaves the list; a
 * failed one stays, with its error, until dismissed). */
export async function startUpload(file: File): Promise<UploadResult> {
  const id = nextId++;
  set([
    ...uploads,
    { id, name: file.name, size: file.size, progress: 0, error: null, done: false },
  ]);
  try {
    const result = await uploadFile(file, (progress) => update(id, { progress }));
    set(uploads.filter((u) => u.id !== id));
    return result;
  } catch (exc) {
    update(id, { error: exc instanceof Error ? exc.message : String(exc), done: true });
    throw exc;
  }
}

export function dismissUpload(id: number) {
  set(uploads.filter((u) => u.id !== id));
}

function subscribe(listener: () => void) {
  listeners.add(listener);
  return () => listeners.delete(listener);
}

export function useUploads(): UploadState[] {
  return useSyncExternalStore(subscribe, () => uploads);
}
