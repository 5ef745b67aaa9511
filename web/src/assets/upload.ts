// One upload to POST /api/v1/uploads with its progress. fetch() reports no upload progress,
// so this one request goes through XMLHttpRequest, with the session's token as every other.
import { ApiError } from "../api/client";
import { getToken } from "../api/session";
import type { Asset, Problem } from "../api/types";

export interface UploadResult {
  asset: Asset;
  /** False when the account already had this content (200): the asset it had. */
  created: boolean;
}

/** The problem an upload answered with, whatever its body was. */
export function uploadProblem(status: number, body: string): ApiError {
  let parsed: Partial<Problem> = {};
  try {
    const value: unknown = JSON.parse(body);
    if (value && typeof value === "object") parsed = value as Partial<Problem>;
  } catch {
    // not JSON: a proxy's page, say
  }
  const detail =
    parsed.detail ||
    parsed.title ||
    (status === 0 ? "The upload was interrupted (network error)." : `HTTP ${status}`);
  return new ApiError({ ...parsed, status, detail } as Problem);
}

/** Upload `file` as multipart/form-data; `onProgress` gets the share sent, 0 to 1. */
export function uploadFile(
  file: File,
  onProgress: (fraction: number) => void,
  signal?: AbortSignal,
): Promise<UploadResult> {
  return new Promise((resolve, reject) => {
    const xhr = new XMLHttpRequest();
    xhr.open("POST", "/api/v1/uploads");
    const token = getToken();
    if (token) xhr.setRequestHeader("Authorization", `Bearer ${token}`);
    xhr.upload.onprogress = (e) => {
      if (e.lengthComputable && e.total > 0) onProgress(e.loaded / e.total);
    };
    xhr.onload = () => {
      if (xhr.status === 200 || xhr.status === 201) {
        onProgress(1);
        resolve({ asset: JSON.parse(xhr.responseText) as Asset, created: xhr.status === 201 });
      } else {
        reject(uploadProblem(xhr.status, xhr.responseText));
      }
    };
    xhr.onerror = () => reject(uploadProblem(0, ""));
    xhr.onabort = () => reject(new DOMException("Upload cancelled", "AbortError"));
    if (signal?.aborted) {
      reject(new DOMException("Upload cancelled", "AbortError"));
      return;
    }
    signal?.addEventListener("abort", () => xhr.abort(), { once: true });
    const form = new FormData();
    form.append("file", file, file.name);
    form.append("name", file.name);
    xhr.send(form);
  });
}
