import { Link, useParams } from "react-router";
import { useWorkflowChoices } from "../api/queries";
import { REMOVE } from "../forms/SchemaForm";

/** A Workflow node's `workflow_id` param: a select of the account's other workflows, and a
 * link to open the chosen one. A value naming no workflow of the account (deleted since)
 * stays selected, marked missing, so opening the form never changes the graph. */
export function WorkflowPicker({
  id,
  value,
  onChange,
}: {
  id: string;
  value: unknown;
  onChange: (value: unknown) => void;
}) {
  const { workflowId } = useParams();
  const workflows = useWorkflowChoices();
  const choices = (workflows.data ?? []).filter((w) => w.id !== workflowId);
  const current = typeof value === "string" ? value : "";
  const missing = current !== "" && workflows.isSuccess && !choices.some((w) => w.id === current);
  const hint = `${id}-hint`;
  return (
    <div className="field">
      <label htmlFor={id}>Workflow</label>
      <select
        id={id}
        aria-describedby={hint}
        aria-invalid={missing || current === "" || undefined}
        value={current}
        onChange={(e) => onChange(e.target.value === "" ? REMOVE : e.target.value)}
      >
        <option value="">Choose a workflow…</option>
        {choices.map((w) => (
          <option key={w.id} value={w.id}>
            {w.name}
          </option>
        ))}
        {missing && <option value={current}>Missing workflow ({current.slice(0, 8)}…)</option>}
        {!workflows.isSuccess && current !== "" && <option value={current}>{current}</option>}
      </select>
      <div className="hint" id={hint}>
        The workflow this node runs as a step: its text inputs become this node&apos;s inputs, its
        output this node&apos;s output.{" "}
        {current !== "" && !missing && <Link to={`/workflows/${current}`}>Open it</Link>}
      </div>
      {missing && (
        <div className="error">This workflow no longer exists in your account: pick another.</div>
      )}
    </div>
  );
}
