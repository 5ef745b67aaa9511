import { memo, useState } from "react";
import { Handle, Position, useEdges, type NodeProps } from "@xyflow/react";
import type { FlowNode } from "../graph/convert";
import { OUTPUT_HANDLE, handleKey } from "../graph/kinds";
import { CACHED_NOTE, Status } from "../components/Status";
import { ArtifactPreview } from "./ArtifactPreview";
import { UNKNOWN_NOTE, unknownTitle } from "../graph/unknown";
import { useEditor } from "./context";

/** One node on the canvas: an element with role "group" named by the node type's title,
 * carrying its live run state in data-status; typed handles (red while a dragged connection
 * may not end on them), problems, warnings and output (which can be folded away). */
function FlowNodeViewInner({ id, type }: NodeProps<FlowNode>) {
  const { catalog, live, problems, warnings, refused } = useEditor();
  const [folded, setFolded] = useState(false);
  const spec = catalog.get(type);
  const state = live[id];
  const status = state?.status ?? "idle";
  const nodeProblems = problems?.nodes.get(id) ?? [];
  const nodeWarnings = warnings?.nodes.get(id) ?? [];
  const title = spec?.title ?? unknownTitle(type);
  const handleClass = (handle: string) =>
    refused.has(handleKey(id, handle)) ? "refused" : undefined;
  return (
    <div
      role="group"
      aria-label={title}
      data-status={status}
      data-cached={state?.cached ? "true" : undefined}
      data-node-id={id}
      data-unknown={spec ? undefined : "true"}
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
        {spec && (
          <div className="port out">
            {spec.output.kind}
            <span className="kind-dot" data-kind={spec.output.kind} />
            <Handle
              type="source"
              position={Position.Right}
              id={OUTPUT_HANDLE}
              className={handleClass(OUTPUT_HANDLE)}
              data-kind={spec.output.kind}
              aria-label={`output (${spec.output.kind})`}
            />
          </div>
        )}
      </div>
      {status === "running" && state?.progress !== undefined && (
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
      {state?.status === "completed" && state.artifactId && (
        <div className="body nodrag nowheel">
          <button
            type="button"
            className="fold"
            aria-expanded={!folded}
            onClick={() => setFolded(!folded)}
          >
            {folded ? "Show output" : "Hide output"}
          </button>
          {!folded && <ArtifactPreview artifactId={state.artifactId} compact />}
        </div>
      )}
    </div>
  );
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
