import { useEffect, useRef, useState } from "react";
import type { RunEstimate } from "../api/types";
import type { FlowNode } from "../graph/convert";
import { inputFields } from "./runInput";
import { mediaFields, runInput } from "../assets/media";
import { MediaPicker } from "./MediaPicker";

export function RunDialog({
  open,
  nodes,
  estimate,
  error,
  onStart,
  onClose,
}: {
  open: boolean;
  nodes: FlowNode[];
  estimate: RunEstimate | null;
  error: string | null;
  onStart: (input: Record<string, string> | null, cache: boolean) => void;
  onClose: () => void;
}) {
  const ref = useRef<HTMLDialogElement>(null);
  const fields = inputFields(nodes);
  const media = mediaFields(nodes);
  const [values, setValues] = useState<Record<string, string>>({});
  const [files, setFiles] = useState<Record<string, string>>({});
  useEffect(() => {
    const dialog = ref.current;
    if (!dialog) return;
    if (open && !dialog.open) {
      setValues(Object.fromEntries(inputFields(nodes).map((f) => [f.key, f.initial])));
      setFiles(Object.fromEntries(mediaFields(nodes).map((f) => [f.key, f.initial])));
      dialog.showModal();
    }
    if (!open && dialog.open) dialog.close();
  }, [open, nodes]);
  const short = estimate !== null && estimate.estimated_credits > estimate.credits_balance;
  return (
    <dialog ref={ref} onCancel={onClose} aria-labelledby="run-title">
      <form
        onSubmit={(e) => {
          e.preventDefault();
          // The submitter says which: "Start run" uses the cache, the other does not.
          const submitter = (e.nativeEvent as SubmitEvent).submitter;
          const input = runInput(
            values,
            fields.map((f) => f.key),
            files,
            media.map((f) => f.key),
          );
          onStart(input, submitter?.dataset.cache !== "false");
        }}
      >
        <h2 id="run-title">Run this workflow</h2>
        {fields.length === 0 && media.length === 0 && (
          <p className="muted small">
            This graph has no input node with a key: it runs without input data.
          </p>
        )}
        {fields.map((field) => (
          <div className="field" key={field.key}>
            <label htmlFor={`run-input-${field.key}`}>Input “{field.key}”</label>
            <textarea
              id={`run-input-${field.key}`}
              value={values[field.key] ?? ""}
              onChange={(e) => setValues({ ...values, [field.key]: e.target.value })}
            />
          </div>
        ))}
        {media.map((field) => (
          <MediaPicker
            key={field.key}
            field={field}
            value={files[field.key] ?? ""}
            enabled={open}
            onChange={(assetId) => setFiles((now) => ({ ...now, [field.key]: assetId }))}
          />
        ))}
        <p aria-live="polite">
          {estimate === null ? (
            "Estimating…"
          ) : (
            <>
              Estimated cost: <b data-testid="estimated-credits">{estimate.estimated_credits}</b>{" "}
              credits (balance {estimate.credits_balance}). Nodes are charged as they complete; what
              is not used is given back. A node whose output is cached from an earlier identical run
              costs 0 credits; “Start without cache” computes and charges every node again.
            </>
          )}
        </p>
        {estimate !== null && estimate.nodes.some((n) => n.credits > 0) && (
          <details>
            <summary className="small">Cost per node</summary>
            <ul className="small" data-testid="estimate-nodes">
              {estimate.nodes
                .filter((n) => n.credits > 0)
                .map((n) => (
                  <li key={n.node_id}>
                    {n.node_id} ({n.type}): at most {n.credits} credit{n.credits === 1 ? "" : "s"}
                  </li>
                ))}
            </ul>
          </details>
        )}
        {short && <div className="banner error">Not enough credits for this run.</div>}
        {error && (
          <div className="banner error" role="alert">
            {error}
          </div>
        )}
        <div className="row" style={{ justifyContent: "flex-end" }}>
          <button type="button" onClick={onClose}>
            Close
          </button>
          <button type="submit" data-cache="false" disabled={estimate === null || short}>
            Start without cache
          </button>
          <button type="submit" className="primary" disabled={estimate === null || short}>
            Start run
          </button>
        </div>
      </form>
    </dialog>
  );
}
