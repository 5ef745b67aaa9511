import { useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useCredentialKinds, useCredentials } from "../api/queries";
import type { Credential, CredentialTestResult } from "../api/types";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { ErrorBanner, TableHead, useAction } from "../components/forms";
import { formatTime } from "../components/Status";
import {
  DEFAULT_KIND,
  createFields,
  kindOf,
  maskedSecret,
  rotateFields,
  shownFields,
  type CredentialKind,
  type KindField,
} from "../credentials/kinds";
import { privateHost } from "../credentials/privateAddress";
import { CredentialServers } from "../credentials/CredentialServers";

/** The account's provider credentials: list, add, test, rotate, delete. A secret is typed
 * once and never shown again: the server answers only its masked hint. */
export function CredentialsSection() {
  const client = useQueryClient();
  const list = useCredentials();
  const kinds = useCredentialKinds().data ?? [];
  const { error, setError, act } = useAction();
  const [testing, setTesting] = useState<string | null>(null);
  const [results, setResults] = useState<Record<string, CredentialTestResult>>({});
  const [rotating, setRotating] = useState<Credential | null>(null);
  const [deleting, setDeleting] = useState<Credential | null>(null);
  const refresh = () => client.invalidateQueries({ queryKey: keys.credentials });
  // Closing the rotate form returns focus to the button that opened it.
  const closeRotate = (c: Credential) => {
    setRotating(null);
    requestAnimationFrame(() =>
      document
        .querySelector<HTMLButtonElement>(`[data-credential-id="${c.id}"] [data-action="rotate"]`)
        ?.focus(),
    );
  };

  const test = (c: Credential) =>
    act(async () => {
      setTesting(c.id);
      try {
        const result = unwrap(
          await api.POST("/api/v1/credentials/{credential_id}/test", {
            params: { path: { credential_id: c.id } },
          }),
        );
        setResults((r) => ({ ...r, [c.id]: result }));
      } finally {
        setTesting(null);
      }
    });

  const remove = (c: Credential) => {
    setDeleting(null);
    return act(async () => {
      unwrap(
        await api.DELETE("/api/v1/credentials/{credential_id}", {
          params: { path: { credential_id: c.id } },
        }),
      );
      await refresh();
    });
  };

  const credentials = list.data ?? [];
  return (
    <section aria-labelledby="credentials-heading">
      <h2 id="credentials-heading">Credentials</h2>
      <p className="small muted">
        Your own provider accounts. A node that names one calls that provider with that key, and you
        pay the provider directly. Secrets are stored encrypted and are never shown again, not even
        to you.
      </p>
      <ErrorBanner error={error} />
      <AddCredentialForm kinds={kinds} onCreated={refresh} onError={setError} />
      <table className="stack-table" aria-label="Credentials">
        <TableHead columns={["Name", "Kind", "Secret", "Details", "Last used"]} actions />
        <tbody>
          {credentials.map((c) => {
            const result = results[c.id];
            return (
              <tr key={c.id} data-credential-id={c.id}>
                <td>{c.name}</td>
                <td className="mono" data-label="Kind">
                  {c.kind}
                </td>
                <td className="mono" data-label="Secret" data-testid="credential-hint">
                  {maskedSecret(c.hint)}
                </td>
                <td className="small">
                  {shownFields(kindOf(kinds, c.kind), c.fields).map((f) => (
                    <div key={f.label}>
                      {f.label}: <span className="mono">{f.value}</span>
                    </div>
                  ))}
                  {c.kind === "comfyui" && Array.isArray(c.fields.servers) && (
                    <CredentialServers credential={c.id} name={c.name} />
                  )}
                  {result && (
                    <div
                      role="status"
                      className={result.ok ? "test-ok" : "test-failed"}
                      data-testid="credential-test-result"
                    >
                      {result.ok ? "Connection works" : "Connection failed"}
                      {result.status ? ` (HTTP ${result.status})` : ""}: {result.message}
                    </div>
                  )}
                </td>
                <td data-label="Last used">
                  {c.last_used_at ? formatTime(c.last_used_at) : "never"}
                </td>
                <td className="actions">
                  <div className="row end">
                    {kindOf(kinds, c.kind)?.testable !== false && (
                      <button
                        type="button"
                        onClick={() => void test(c)}
                        disabled={testing === c.id}
                        aria-label={`Test connection of ${c.name}`}
                      >
                        {testing === c.id ? "Testing…" : "Test connection"}
                      </button>
                    )}
                    <button
                      type="button"
                      data-action="rotate"
                      onClick={() => setRotating(c)}
                      aria-label={`Rotate secret of ${c.name}`}
                    >
                      Rotate secret
                    </button>
                    <button
                      type="button"
                      className="danger"
                      onClick={() => setDeleting(c)}
                      aria-label={`Delete ${c.name}`}
                    >
                      Delete
                    </button>
                  </div>
                </td>
              </tr>
            );
          })}
          {list.isSuccess && credentials.length === 0 && (
            <tr>
              <td colSpan={6} className="muted">
                No credentials yet: provider nodes use the operator’s default provider.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      {rotating && (
        <RotateForm
          credential={rotating}
          spec={kindOf(kinds, rotating.kind)}
          onDone={async () => {
            closeRotate(rotating);
            setResults(({ [rotating.id]: _dropped, ...rest }) => {
              void _dropped;
              return rest;
            });
            await refresh();
          }}
          onCancel={() => closeRotate(rotating)}
          onError={setError}
        />
      )}
      <ConfirmDialog
        open={deleting !== null}
        title={`Delete “${deleting?.name ?? ""}”?`}
        confirmLabel="Delete credential"
        onCancel={() => setDeleting(null)}
        onConfirm={() => deleting && void remove(deleting)}
      >
        <p>
          The secret is erased at once. Workflows whose nodes use this credential will stop running
          (they are refused until they name another credential), and a run already waiting fails at
          that node.
        </p>
      </ConfirmDialog>
    </section>
  );
}

function FieldInput({
  id,
  field,
  value,
  onChange,
  label,
  autoFocus = false,
}: {
  id: string;
  field: KindField;
  value: string;
  onChange: (value: string) => void;
  label?: string;
  autoFocus?: boolean;
}) {
  return (
    <div className="field">
      <label htmlFor={id}>
        {label ?? field.label}
        {field.optional ? " (optional)" : ""}
      </label>
      <input
        id={id}
        type={field.secret ? "password" : field.name === "base_url" ? "url" : "text"}
        autoComplete={field.secret ? "new-password" : "off"}
        spellCheck={false}
        placeholder={field.placeholder}
        required={!field.optional}
        autoFocus={autoFocus}
        value={value}
        onChange={(e) => onChange(e.target.value)}
      />
      {field.name === "base_url" && privateHost(value) && (
        <div className="hint warn-text" role="note">
          {privateHost(value)} is a private address: this server refuses it unless its administrator
          allows it, e.g. by starting it with NODELOOM_HTTP_ALLOWLIST=&apos;[&quot;
          {privateHost(value)}&quot;]&apos;. Test the credential to see.
        </div>
      )}
    </div>
  );
}

function AddCredentialForm({
  kinds,
  onCreated,
  onError,
}: {
  kinds: readonly CredentialKind[];
  onCreated: () => Promise<unknown>;
  onError: (message: string | null) => void;
}) {
  const [name, setName] = useState("");
  const [kind, setKind] = useState(DEFAULT_KIND);
  const [values, setValues] = useState<Record<string, string>>({});
  const { error, act } = useAction();
  const spec = kindOf(kinds, kind);
  const submit = () =>
    act(async () => {
      onError(null);
      unwrap(
        await api.POST("/api/v1/credentials", {
          body: { name: name.trim(), kind, fields: createFields(spec, values) },
        }),
      );
      setName("");
      setValues({});
      await onCreated();
    });
  return (
    <form
      className="card credential-form"
      aria-label="Add a credential"
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
    >
      <h3>Add a credential</h3>
      <div className="field">
        <label htmlFor="credential-name">Name</label>
        <input
          id="credential-name"
          required
          maxLength={200}
          placeholder="my OpenAI account"
          value={name}
          onChange={(e) => setName(e.target.value)}
        />
      </div>
      <div className="field">
        <label htmlFor="credential-kind">Kind</label>
        <select
          id="credential-kind"
          value={kind}
          onChange={(e) => {
            setKind(e.target.value);
            setValues({});
          }}
        >
          {kinds.map((k) => (
            <option key={k.kind} value={k.kind}>
              {k.label}
              {k.drivesNodes ? "" : " — stored only, for now"}
            </option>
          ))}
        </select>
      </div>
      {spec?.fields.map((f) => (
        <FieldInput
          key={`${kind}-${f.name}`}
          id={`credential-field-${f.name}`}
          field={f}
          value={values[f.name] ?? ""}
          onChange={(v) => setValues((old) => ({ ...old, [f.name]: v }))}
        />
      ))}
      <p className="small muted">
        Secret fields are encrypted on arrival and never shown again; the list shows only their last
        characters.
      </p>
      <ErrorBanner error={error} />
      <button type="submit" className="primary">
        Add credential
      </button>
    </form>
  );
}

function RotateForm({
  credential,
  spec,
  onDone,
  onCancel,
  onError,
}: {
  credential: Credential;
  spec: CredentialKind | undefined;
  onDone: () => Promise<void>;
  onCancel: () => void;
  onError: (message: string | null) => void;
}) {
  const [values, setValues] = useState<Record<string, string>>({});
  const { error, act } = useAction();
  const secrets = spec?.fields.filter((f) => f.secret) ?? [];
  const fields = rotateFields(spec, values);
  const submit = () =>
    act(async () => {
      if (!fields) return;
      onError(null);
      unwrap(
        await api.PATCH("/api/v1/credentials/{credential_id}", {
          params: { path: { credential_id: credential.id } },
          body: { fields },
        }),
      );
      await onDone();
    });
  return (
    <form
      className="card credential-form"
      aria-label={`Rotate the secret of ${credential.name}`}
      onSubmit={(e) => {
        e.preventDefault();
        void submit();
      }}
      onKeyDown={(e) => {
        if (e.key === "Escape") onCancel();
      }}
    >
      <h3>Rotate the secret of “{credential.name}”</h3>
      <p className="small muted">
        The new secret replaces the stored one; the other fields are kept. The next node that runs
        uses it.
      </p>
      {secrets.map((f, i) => (
        <FieldInput
          key={f.name}
          id={`rotate-field-${f.name}`}
          field={{ ...f, optional: true }}
          label={`New ${f.label.toLowerCase()}`}
          value={values[f.name] ?? ""}
          onChange={(v) => setValues((old) => ({ ...old, [f.name]: v }))}
          autoFocus={i === 0}
        />
      ))}
      <ErrorBanner error={error} />
      <div className="row">
        <button type="submit" className="primary" disabled={!fields}>
          Save new secret
        </button>
        <button type="button" onClick={onCancel}>
          Cancel
        </button>
      </div>
    </form>
  );
}
