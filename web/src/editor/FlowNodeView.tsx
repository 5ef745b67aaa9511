import { memo, useEffect, useRef, useState } from "react";
import { Handle, Position, useEdges, useUpdateNodeInternals, type NodeProps } from "@xyflow/react";
import type { FlowNode } from "../graph/convert";
import { handleKey, outputsOf, showsErrorOutput } from "../graph/kinds";
import { CACHED_NOTE, Status } from "../components/Status";
import { ArtifactPreview } from "./ArtifactPreview";
import { UNKNOWN_NOTE, unknownTitle } from "../graph/unknown";
import { useEditor } from "./context";
import { specKey } from "../graph/subworkflow";
import type { ItemsLive } from "../events/runEvents";
import { iterationLabel } from "../graph/repeat";

/** One node on the canvas: an element with role "group" named by the node type's title,
 * carrying its live run state in data-status; typed handles (red while a dragged connection
 * may not end on them), problems, warnings and output (which can be folded away). */
function FlowNodeViewInner({ id, type, data }: NodeProps<FlowNode>) {
  const { catalog, live, problems, warnings, refused, stale, repeats } = useEditor();
  const [folded, setFolded] = useState(false);
  const spec = catalog.get(specKey({ type, data })) ?? catalog.get(type);
  const state = live[id];
  const status = state?.status ?? "idle";
  const nodeProblems = problems?.nodes.get(id) ?? [];
  const nodeWarnings = warnings?.nodes.get(id) ?? [];
  const title = spec?.title ?? unknownTitle(type);
  const hasOutput = state?.status === "completed" && Boolean(state.artifactId) && !state.items;
  const isStale = hasOutput && stale.has(id);
  const handleClass = (handle: string) =>
    refused.has(handleKey(id, handle)) ? "refused" : undefined;
  const edges = useEdges();
  const withError = showsErrorOutput({ id, data }, edges);
  const outputs = spec
    ? outputsOf(spec, data).filter((output) => output.role !== "error" || withError)
    : [];
  // Handles come and go with the params (a Switch's cases, the error output): React Flow
  // must measure them again for edges to attach to them.
  // Not on mount: React Flow measures a new node itself, and a second measurement then
  // raced the editor's fit-to-view of an opened graph (nodes left out of view).
  const updateNodeInternals = useUpdateNodeInternals();
  const handlesKey = outputs.map((output) => output.name).join("\n");
  const measuredKey = useRef(handlesKey);
  useEffect(() => {
    if (measuredKey.current === handlesKey) return;
    measuredKey.current = handlesKey;
    updateNodeInternals(id);
  }, [id, handlesKey, updateNodeInternals]);
  return (
    <div
      role="group"
      aria-label={title}
      data-status={status}
      data-cached={state?.cached ? "true" : undefined}
      data-node-id={id}
      data-unknown={spec ? undefined : "true"}
      data-stale={isStale ? "true" : undefined}
      className={`nl-node${spec ? "" : " unknown"}${nodeProblems.length ? " has-problem" : ""}${
        nodeWarnings.length ? " has-warning" : ""
      }`}
    >
      <header>
        <span>{title}</span>
        {state && <Status status={state.status} cached={state.cached} />}
      </header>
      <div className="ports">
        {(spec?.inputs ?? []).map((input) => (
          <div className="port in" key={input.name}>
            <Handle
              type="target"
              position={Position.Left}
              id={input.name}
              className={handleClass(input.name)}
              data-kind={input.kind}
              aria-label={`${input.name} input (${input.kind})`}
            />
            <span className="kind-dot" data-kind={input.kind} />
            {input.name}
            {input.required ? "" : " (optional)"}
          </div>
        ))}
        {spec &&
          outputs.map((output) => (
            <div className={`port out ${output.role}`} key={output.name}>
              {output.role === "output" ? output.kind : output.name}
              <span className="kind-dot" data-kind={output.kind} />
              <Handle
                type="source"
                position={Position.Right}
                id={output.name}
                className={handleClass(output.name)}
                data-kind={output.kind}
                aria-label={`${output.name} output (${output.kind})`}
              />
            </div>
          ))}
      </div>
      {state?.items && <ItemsView items={state.items} bound={repeats.get(id)} />}
      {state?.fanOut !== undefined && (
        <div className="items-count small" aria-label="Items">
          {state.fanOut} {state.fanOut === 1 ? "item" : "items"}
        </div>
      )}
      {status === "running" && state?.progress !== undefined && !state.items && (
        <div className="progress" aria-label="Progress">
          <div style={{ width: `${Math.round(state.progress * 100)}%` }} />
        </div>
      )}
      {nodeProblems.map((message, i) => (
        <div className="problem" role="alert" key={i}>
          {message}
        </div>
      ))}
      {nodeWarnings.map((message, i) => (
        <div className="warning" role="note" key={i}>
          {message}
        </div>
      ))}
      {state?.cached && state.status === "completed" && (
        <div className="cached-note small" title={CACHED_NOTE}>
          Cached: 0 credits
        </div>
      )}
      {state?.error && (
        <div className="problem" role="alert">
          {state.error}
        </div>
      )}
      {!spec && (
        <>
          <UnknownHandles id={id} />
          {/* The server's own warning says the same, more precisely, when it sent one. */}
          {nodeProblems.length + nodeWarnings.length === 0 && (
            <div className="unknown-note">{UNKNOWN_NOTE}</div>
          )}
        </>
      )}
      {hasOutput && state?.artifactId && (
        <div className="body nodrag nowheel">
          {isStale && (
            <div
              className="stale-note small"
              role="note"
              title="This node or one before it changed since the run: run again to update"
            >
              Stale: changed since this run
            </div>
          )}
          <button
            type="button"
            className="fold"
            aria-expanded={!folded}
            onClick={() => setFolded(!folded)}
          >
            {folded ? "Show output" : "Hide output"}
          </button>
          {!folded && (
            <div className="canvas-preview" title="Select the node to see its output in full">
              <ArtifactPreview artifactId={state.artifactId} compact />
            </div>
          )}
        </div>
      )}
    </div>
  );
}

/** A node run once per item of a ForEach: "17/40" items done, and one item's output
 * opened by picking its number (docs/batches.md). In a Repeat region (`bound`, its
 * max_iterations) the items are iterations: "iteration 2/5" (docs/repeat.md). */
function ItemsView({ items, bound }: { items: ItemsLive; bound?: number }) {
  const [open, setOpen] = useState<number | null>(null);
  const indexes = Object.keys(items.byIndex)
    .map(Number)
    .sort((a, b) => a - b);
  const item = open === null ? undefined : items.byIndex[open];
  return (
    <div className="items nodrag nowheel">
      <div
        className="items-count"
        aria-label={bound === undefined ? "Items done" : "Iteration"}
        role="status"
      >
        {bound === undefined ? `${items.done}/${items.total}` : iterationLabel(items.total, bound)}
        {items.failed > 0 && <span className="failed-count"> · {items.failed} failed</span>}
      </div>
      <div className="progress" aria-hidden="true">
        <div style={{ width: `${Math.round(shareDone(items, bound) * 100)}%` }} />
      </div>
      <label className="small">
        {bound === undefined ? "Item" : "Iteration"}{" "}
        <select
          aria-label={bound === undefined ? "Show item" : "Show iteration"}
          value={open ?? ""}
          onChange={(e) => setOpen(e.target.value === "" ? null : Number(e.target.value))}
        >
          <option value="">—</option>
          {indexes.map((i) => (
            <option key={i} value={i}>
              {i + 1} ({items.byIndex[i]?.status})
            </option>
          ))}
        </select>
      </label>
      {item?.error && (
        <div className="problem" role="alert">
          {item.error}
        </div>
      )}
      {item?.status === "completed" && item.artifactId && (
        <ArtifactPreview artifactId={item.artifactId} compact />
      )}
    </div>
  );
}

/** How far a node's items are: items done of all, or iterations done of the most allowed. */
function shareDone(items: ItemsLive, bound?: number): number {
  const total = bound === undefined ? items.total : Math.max(bound, items.total);
  return total ? items.done / total : 0;
}

/** The handles an unknown node's stored edges name, so those edges stay drawn (the catalog no
 * longer says which inputs the type has). Not connectable: nothing new can be wired to it. */
function UnknownHandles({ id }: { id: string }) {
  const edges = useEdges();
  const handles = (side: "target" | "source") => {
    const names = edges
      .filter((e) => (side === "target" ? e.target : e.source) === id)
      .map((e) => (side === "target" ? e.targetHandle : e.sourceHandle) ?? "");
    return [...new Set(names)];
  };
  return (
    <>
      {handles("target").map((name) => (
        <Handle
          key={`in-${name}`}
          type="target"
          position={Position.Left}
          id={name || undefined}
          isConnectable={false}
          aria-label={`${name || "input"} input`}
        />
      ))}
      {handles("source").map((name) => (
        <Handle
          key={`out-${name}`}
          type="source"
          position={Position.Right}
          id={name || undefined}
          isConnectable={false}
          aria-label={`${name || "output"} output`}
        />
      ))}
    </>
  );
}

export const FlowNodeView = memo(FlowNodeViewInner);
