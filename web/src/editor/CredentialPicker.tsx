import { Link } from "react-router";
import { useCredentials } from "../api/queries";
import { REMOVE } from "../forms/SchemaForm";
import { NODE_CREDENTIAL_KIND, maskedSecret } from "../credentials/kinds";

/** A provider node's `credential` param: a select of the account's credentials of the kinds
 * the node takes, the operator's provider as the empty choice (unless the node needs a
 * credential), and a link to add one. A value that names no credential of the account
 * (deleted since) stays selected, marked missing, so opening the form never changes the
 * graph. */
export function CredentialPicker({
  id,
  value,
  onChange,
  kinds = [NODE_CREDENTIAL_KIND],
  required = false,
}: {
  id: string;
  value: unknown;
  onChange: (value: unknown) => void;
  kinds?: string[];
  required?: boolean;
}) {
  const credentials = useCredentials();
  const usable = (credentials.data ?? []).filter((c) => kinds.includes(c.kind));
  const current = typeof value === "string" ? value : "";
  const missing = current !== "" && credentials.isSuccess && !usable.some((c) => c.id === current);
  const hint = `${id}-hint`;
  return (
    <div className="field">
      <label htmlFor={id}>Credential</label>
      <select
        id={id}
        aria-describedby={hint}
        aria-invalid={missing || undefined}
        value={current}
        onChange={(e) => onChange(e.target.value === "" ? REMOVE : e.target.value)}
      >
        <option value="" disabled={required}>
          {required ? "Choose a credential" : "Operator’s default provider"}
        </option>
        {usable.map((c) => (
          <option key={c.id} value={c.id}>
            {c.name} ({maskedSecret(c.hint)})
          </option>
        ))}
        {missing && <option value={current}>Missing credential ({current.slice(0, 8)}…)</option>}
        {!credentials.isSuccess && current !== "" && <option value={current}>{current}</option>}
      </select>
      <div className="hint" id={hint}>
        Which {kinds.join(" or ")} credential of your account this node calls with.{" "}
        {usable.length === 0 && credentials.isSuccess ? "You have none yet. " : ""}
        <Link to="/profile#credentials-heading">Add a credential</Link>
      </div>
      {missing && (
        <div className="error">
          This credential no longer exists: pick another
          {required ? "." : ", or the operator’s default provider."}
        </div>
      )}
    </div>
  );
}
