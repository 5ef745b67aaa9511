// Large files go up over tus 1.0 (/api/v1/uploads/tus) with tus-js-client: in pieces, each
// tried again from the last byte the server kept when the connection drops, and a file chosen
// again after the tab was closed resumes where it stopped (the library keeps the upload's
// address in localStorage, keyed by the file's name, size and date). Smaller files keep the
// one multipart request (upload.ts): for them a retry costs less than the extra round trips.
import * as tus from "tus-js-client";
import { api, unwrap } from "../api/client";
import { getToken } from "../api/session";
import type { Asset } from "../api/types";
import { uploadProblem, type UploadResult } from "./upload";

/** Files larger than this go through tus (as the Python client does). */
export const RESUMABLE_ABOVE = 8 * 1024 * 1024;
/** Bytes per PATCH: what a dropped connection can cost at most. */
export const CHUNK_BYTES = 16 * 1024 * 1024;
/** Waits between tries after a network error or a 5xx (then the upload fails). */
export const RETRY_DELAYS = [0, 1000, 3000, 5000, 10000, 20000];

export function isResumable(file: { size: number }): boolean {
  return file.size > RESUMABLE_ABOVE;
}

/** The problem a failed tus request answered with (or a network error's). */
export function problemOf(error: Error): Error {
  const response = (error as tus.DetailedError).originalResponse;
  if (!response) return uploadProblem(0, "");
  return uploadProblem(response.getStatus(), response.getBody() ?? "");
}

/** Whether an asset is new to the account: made after this upload was created (the server's
 * clock both times). An upload resumed from an earlier tab has no creation time here: new. */
export function isNewAsset(asset: Pick<Asset, "created_at">, createdAt: number | null): boolean {
  if (createdAt === null) return true;
  // The Date header has whole seconds; the asset's time has more.
  return Date.parse(asset.created_at) >= createdAt - (createdAt % 1000);
}

/** Upload `file` over tus; `onProgress` gets the share the server has, 0 to 1. Aborting
 * `signal` ends the upload on the server too (its bytes and the quota it held are freed). */
export function uploadResumable(
  file: File,
  onProgress: (fraction: number) => void,
  signal?: AbortSignal,
): Promise<UploadResult> {
  return new Promise((resolve, reject) => {
    let createdAt: number | null = null;
    const upload = new tus.Upload(file, {
      endpoint: "/api/v1/uploads/tus",
      chunkSize: CHUNK_BYTES,
      retryDelays: RETRY_DELAYS,
      metadata: { filename: file.name },
      removeFingerprintOnSuccess: true,
      onBeforeRequest: (req) => {
        // Read for every request: a long upload outlives nothing the session renews.
        const token = getToken();
        if (token) req.setHeader("Authorization", `Bearer ${token}`);
      },
      onAfterResponse: (req, res) => {
        if (req.getMethod() === "POST" && res.getStatus() === 201) {
          const date = res.getHeader("Date");
          createdAt = date ? Date.parse(date) : null;
        }
      },
      onProgress: (sent, total) => {
        if (total > 0) onProgress(sent / total);
      },
      onError: (error) => reject(problemOf(error)),
      onSuccess: ({ lastResponse }) => {
        const assetId = lastResponse.getHeader("Nodeloom-Asset-Id");
        if (!assetId) {
          reject(uploadProblem(lastResponse.getStatus(), lastResponse.getBody() ?? ""));
          return;
        }
        api
          .GET("/api/v1/assets/{asset_id}", { params: { path: { asset_id: assetId } } })
          .then(unwrap)
          .then((asset) => {
            onProgress(1);
            resolve({ asset, created: isNewAsset(asset, createdAt) });
          }, reject);
      },
    });
    const cancelled = () => reject(new DOMException("Upload cancelled", "AbortError"));
    if (signal?.aborted) {
      cancelled();
      return;
    }
    signal?.addEventListener(
      "abort",
      () => {
        // true: DELETE the upload, so the server drops what it kept.
        upload.abort(true).then(cancelled, cancelled);
      },
      { once: true },
    );
    upload.findPreviousUploads().then(
      (previous) => {
        if (signal?.aborted) return;
        const latest = previous[0];
        if (latest) upload.resumeFromPreviousUpload(latest);
        upload.start();
      },
      () => upload.start(),
    );
  });
}
