import type { NodeType } from "../api/types";
import type { FlowEdge, FlowNode } from "../graph/convert";
import {
  ERROR_HANDLE,
  ERROR_OUTPUT_FLAG,
  refusal,
  showsErrorOutput,
  targetInput,
} from "../graph/kinds";
import { REMOVE, SchemaForm } from "../forms/SchemaForm";
import { LABEL_MAX, labelProblem, nodeLabel } from "../graph/label";
import { isNote } from "../graph/note";
import { isGroup } from "../graph/group";
import { useEffect, useState } from "react";
import type { JsonSchema } from "../forms/schema";
import { UNKNOWN_NOTE, unknownTitle } from "../graph/unknown";
import { credentialRequired, nodeCredentialKinds, takesCredential } from "../credentials/kinds";
import { CredentialPicker } from "./CredentialPicker";
import { WorkflowPicker } from "./WorkflowPicker";
import { WORKFLOW_TYPE, specKey } from "../graph/subworkflow";
import { ModelInputForm } from "./ModelInputForm";
import { MODEL_NODE_TYPES } from "../credentials/modelSchema";
import { useEditor } from "./context";

/** The selected node: what it is, its params as a form, its inputs as pickers (a keyboard
 * way to connect nodes), and delete. */
export function ParamsPanel({
  node,
  nodes,
  edges,
  onParam,
  onConnectInput,
  onDelete,
}: {
  node: FlowNode;
  nodes: FlowNode[];
  edges: FlowEdge[];
  onParam: (nodeId: string, name: string, value: unknown) => void;
  onConnectInput: (nodeId: string, input: string, sourceId: string | null) => void;
  onDelete: () => void;
}) {
  const { catalog, problems, warnings, ungroup } = useEditor();
  const spec = catalog.get(specKey(node)) ?? catalog.get(node.type ?? "");
  if (isNote(node)) {
    return (
      <div>
        <h2>Sticky note</h2>
        <p className="small muted">
          A note for whoever reads this workflow: write on it on the canvas. It is saved with the
          workflow, never run, and cannot be connected.
        </p>
        <button type="button" className="danger" onClick={onDelete}>
          Delete note
        </button>
      </div>
    );
  }
  if (isGroup(node)) {
    return (
      <div>
        <h2>Group</h2>
        <p className="small muted">
          A frame around nodes: its title is edited on the canvas, and moving it moves the nodes in
          it. It is saved with the workflow and never run.
        </p>
        <div className="row">
          <button type="button" onClick={() => ungroup(node.id)}>
            Ungroup
          </button>
          <button type="button" className="danger" onClick={onDelete}>
            Delete group
          </button>
        </div>
      </div>
    );
  }
  if (!spec) {
    return (
      <div>
        <h2>{unknownTitle(node.type ?? "")}</h2>
        <p className="small">{UNKNOWN_NOTE}</p>
        <h3>Parameters (kept as they are)</h3>
        <pre className="params-json" aria-label="Parameters">
          {JSON.stringify(node.data, null, 2)}
        </pre>
        <button type="button" className="danger" onClick={onDelete}>
          Delete node
        </button>
      </div>
    );
  }
  const nodeProblems = problems?.nodes.get(node.id) ?? [];
  const nodeWarnings = warnings?.nodes.get(node.id) ?? [];
  return (
    <div>
      <h2>{nodeLabel(node.data) ?? spec.title}</h2>
      <p className="muted small">
        {spec.description} <span className="mono">({node.id})</span>
      </p>
      <NameField
        key={node.id}
        nodeId={node.id}
        label={nodeLabel(node.data) ?? ""}
        onRename={(value) => onParam(node.id, "label", value === "" ? REMOVE : value)}
      />
      {nodeProblems.length > 0 && (
        <div className="banner error" role="alert">
          {nodeProblems.map((p, i) => (
            <div key={i}>{p}</div>
          ))}
        </div>
      )}
      {nodeWarnings.length > 0 && (
        <div className="banner warn" role="note">
          {nodeWarnings.map((w, i) => (
            <div key={i}>{w}</div>
          ))}
        </div>
      )}
      {spec.inputs.length > 0 && <h3>Inputs</h3>}
      {spec.inputs.map((input) => (
        <InputPicker
          key={input.name}
          node={node}
          spec={spec}
          input={input}
          nodes={nodes}
          edges={edges}
          catalog={catalog}
          onConnect={(source) => onConnectInput(node.id, input.name, source)}
        />
      ))}
      <h3>Parameters</h3>
      <SchemaForm
        schema={spec.params_schema as JsonSchema}
        nodeType={spec.type}
        data={node.data}
        idPrefix={`param-${node.id}`}
        onChange={(name, value) => onParam(node.id, name, value)}
        overrides={{
          ...(spec.type === WORKFLOW_TYPE
            ? {
                workflow_id: (id: string) => (
                  <WorkflowPicker
                    id={id}
                    value={node.data.workflow_id}
                    onChange={(value) => onParam(node.id, "workflow_id", value)}
                  />
                ),
              }
            : {}),
          ...(takesCredential(spec.params_schema)
            ? {
                credential: (id: string) => (
                  <CredentialPicker
                    id={id}
                    kinds={nodeCredentialKinds(spec)}
                    value={node.data.credential}
                    onChange={(value) => onParam(node.id, "credential", value)}
                    required={credentialRequired(spec.params_schema)}
                  />
                ),
              }
            : {}),
          ...(MODEL_NODE_TYPES.has(spec.type)
            ? {
                input: (id: string) => (
                  <ModelInputForm
                    id={id}
                    nodeType={spec.type}
                    data={node.data}
                    inputSchema={
                      ((spec.params_schema as JsonSchema).properties?.input ?? {}) as JsonSchema
                    }
                    onChange={(value) => onParam(node.id, "input", value)}
                  />
                ),
              }
            : {}),
        }}
      />
      <label className="error-output">
        <input
          type="checkbox"
          checked={showsErrorOutput(node, edges)}
          disabled={edges.some((e) => e.source === node.id && e.sourceHandle === ERROR_HANDLE)}
          onChange={(e) => onParam(node.id, ERROR_OUTPUT_FLAG, e.target.checked)}
        />{" "}
        Error output: when this node fails, send its error down an edge and go on
      </label>
      <button type="button" className="danger" onClick={onDelete}>
        Delete node
      </button>
    </div>
  );
}

function InputPicker({
  node,
  spec,
  input,
  nodes,
  edges,
  catalog,
  onConnect,
}: {
  node: FlowNode;
  spec: NodeType;
  input: NodeType["inputs"][number];
  nodes: FlowNode[];
  edges: FlowEdge[];
  catalog: Map<string, NodeType>;
  onConnect: (source: string | null) => void;
}) {
  const into = edges.filter(
    (e) => e.target === node.id && targetInput(spec, e.targetHandle) === input.name,
  );
  const others = edges.filter((e) => !into.includes(e));
  const id = `input-${node.id}-${input.name}`;
  if (input.multiple) {
    return (
      <div className="field">
        <span className="small">
          <b>{input.name}</b> ({input.kind}, several):{" "}
          {into.map((e) => e.source).join(", ") || "not connected"}
        </span>
      </div>
    );
  }
  const candidates = nodes.filter(
    (n) =>
      refusal(
        { source: n.id, target: node.id, targetHandle: input.name },
        nodes,
        others,
        catalog,
      ) === null,
  );
  return (
    <div className="field">
      <label htmlFor={id}>
        {input.name} ({input.kind}
        {input.required ? "" : ", optional"})
      </label>
      <select
        id={id}
        value={into[0]?.source ?? ""}
        onChange={(e) => onConnect(e.target.value || null)}
      >
        <option value="">— not connected —</option>
        {candidates.map((n) => (
          <option key={n.id} value={n.id}>
            {catalog.get(n.type ?? "")?.title ?? n.type} ({n.id})
          </option>
        ))}
      </select>
    </div>
  );
}

/** The node's name (data.label), beside its type: kept as it is typed when the server
 * would take it; its problem shown under it otherwise. */
function NameField({
  nodeId,
  label,
  onRename,
}: {
  nodeId: string;
  label: string;
  onRename: (value: string) => void;
}) {
  const [value, setValue] = useState(label);
  const problem = labelProblem(value);
  const id = `label-${nodeId}`;
  // Renamed elsewhere (a double-click on the canvas, undo): show the name kept.
  useEffect(() => {
    setValue((typed) => (labelProblem(typed) === null && typed !== label ? label : typed));
  }, [label]);
  return (
    <div className="node-name-field">
      <label htmlFor={id}>Name</label>
      <input
        id={id}
        value={value}
        maxLength={LABEL_MAX * 2}
        placeholder="Name this node (shown on the canvas, the run page and in history)"
        aria-invalid={problem ? true : undefined}
        aria-describedby={problem ? `${id}-problem` : undefined}
        onChange={(event) => {
          setValue(event.target.value);
          if (!labelProblem(event.target.value)) onRename(event.target.value);
        }}
      />
      {problem && (
        <div className="error-text small" id={`${id}-problem`} role="alert">
          {problem}
        </div>
      )}
    </div>
  );
}
