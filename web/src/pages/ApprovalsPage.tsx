import { useState } from "react";
import { Link } from "react-router";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useApprovals } from "../api/queries";
import type { Approval } from "../api/types";
import { ArtifactPreview } from "../editor/ArtifactPreview";
import { ErrorBanner, useAction } from "../components/forms";
import { formatTime } from "../components/Status";

/** The "Needs approval" inbox: every Approval node of the account waiting for a person, with
 * what it asks about, an optional comment and (where the node allows it) editable text. */
export function ApprovalsPage() {
  const approvals = useApprovals();
  const items = approvals.data?.data ?? [];
  return (
    <main className="page narrow">
      <h1>Needs approval</h1>
      <p className="small muted">
        Runs paused at an Approval node. Approving sends the value on down the node’s{" "}
        <code>approved</code> output; rejecting, down <code>rejected</code>. Undecided, each takes
        its node’s timeout outcome when it expires.
      </p>
      {approvals.isLoading && <p className="muted">Loading…</p>}
      {approvals.data && items.length === 0 && <p className="muted">Nothing is waiting.</p>}
      <ul className="approvals">
        {items.map((item) => (
          <ApprovalCard key={item.id} item={item} />
        ))}
      </ul>
    </main>
  );
}

function ApprovalCard({ item }: { item: Approval }) {
  const client = useQueryClient();
  const [comment, setComment] = useState("");
  const [text, setText] = useState(item.input?.text ?? "");
  const { error, act } = useAction();
  const [busy, setBusy] = useState(false);
  const edited = item.allow_edit && text !== (item.input?.text ?? "");

  const decide = async (action: "approve" | "reject") => {
    setBusy(true);
    const body = {
      comment: comment.trim() || null,
      text: action === "approve" && edited ? text : null,
    };
    const params = { path: { approval_id: item.id } };
    const done = await act(async () => {
      if (action === "approve") {
        unwrap(await api.POST("/api/v1/approvals/{approval_id}/approve", { params, body }));
      } else {
        unwrap(await api.POST("/api/v1/approvals/{approval_id}/reject", { params, body }));
      }
    });
    setBusy(false);
    if (done) await client.invalidateQueries({ queryKey: keys.approvals });
  };

  const field = `approval-${item.id}`;
  return (
    <li className="card approval" aria-label={`Approval of ${item.workflow_name}`}>
      <h2>
        <Link to={`/workflows/${item.workflow_id}/runs/${item.run_id}`}>{item.workflow_name}</Link>
        <span className="muted small">
          {" "}
          · node {item.node_id}
          {item.item_index != null && `, item ${item.item_index + 1}`}
        </span>
      </h2>
      <p className="prompt">{item.prompt}</p>
      <p className="small muted">
        Waiting since {formatTime(item.created_at)}; expires {formatTime(item.expires_at)} (then{" "}
        {item.timeout_outcome === "approve" ? "approved" : "rejected"}).
      </p>
      {item.input && !(item.allow_edit && item.input.text !== null) && (
        <ArtifactPreview artifactId={item.input.artifact_id} />
      )}
      {item.allow_edit && item.input?.text !== null && item.input?.text !== undefined && (
        <p>
          <label htmlFor={`${field}-text`}>Text (edit before approving)</label>
          <textarea
            id={`${field}-text`}
            rows={5}
            value={text}
            onChange={(e) => setText(e.target.value)}
          />
        </p>
      )}
      <p>
        <label htmlFor={`${field}-comment`}>Comment (optional)</label>
        <input
          id={`${field}-comment`}
          value={comment}
          maxLength={4000}
          onChange={(e) => setComment(e.target.value)}
        />
      </p>
      <ErrorBanner error={error} />
      <div className="row">
        <button type="button" className="primary" disabled={busy} onClick={() => decide("approve")}>
          Approve
        </button>
        <button type="button" disabled={busy} onClick={() => decide("reject")}>
          Reject
        </button>
      </div>
    </li>
  );
}
