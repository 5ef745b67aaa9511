import { memo } from "react";
import { Handle, Position, type NodeProps } from "@xyflow/react";
import type { FlowNode } from "../graph/convert";
import { OUTPUT_HANDLE } from "../graph/kinds";
import { Status } from "../components/Status";
import { ArtifactPreview } from "./ArtifactPreview";
import { useEditor } from "./context";

/** One node on the canvas: an element with role "group" named by the node type's title,
 * carrying its live run state in data-status; typed handles, problems and output. */
function FlowNodeViewInner({ id, type }: NodeProps<FlowNode>) {
  const { catalog, live, problems } = useEditor();
  const spec = catalog.get(type);
  const state = live[id];
  const status = state?.status ?? "idle";
  const nodeProblems = problems?.nodes.get(id) ?? [];
  const title = spec?.title ?? type;
  return (
    <div
      role="group"
      aria-label={title}
      data-status={status}
      data-cached={state?.cached ? "true" : undefined}
      data-node-id={id}
      className={`nl-node${nodeProblems.length ? " has-problem" : ""}`}
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
      {state?.error && (
        <div className="problem" role="alert">
          {state.error}
        </div>
      )}
      {!spec && <div className="problem">Unknown node type {type}</div>}
      {state?.status === "completed" && state.artifactId && (
        <div className="body nodrag nowheel">
          <ArtifactPreview artifactId={state.artifactId} compact />
        </div>
      )}
    </div>
  );
}

export const FlowNodeView = memo(FlowNodeViewInner);
