import { useState } from "react";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useMe } from "../api/queries";
import type { ApiKey, ApiKeyCreated } from "../api/types";
import { ConfirmDialog } from "../components/ConfirmDialog";
import { CopyButton, ErrorBanner, NameForm, TableHead, useAction } from "../components/forms";
import { formatTime } from "../components/Status";
import { CredentialsSection } from "./CredentialsSection";
import { shortRunId } from "../format/runName";

export function ProfilePage() {
  const me = useMe();
  const ledger = useQuery({
    queryKey: keys.ledger,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/me/ledger", { params: { query: { limit: 20 } } })),
  });
  return (
    <main className="page narrow">
      <h1>Profile</h1>
      {me.data && (
        <section className="card" aria-label="Account">
          <p>
            <b>{me.data.email}</b>
          </p>
          <p>
            Plan: <b>{me.data.plan}</b> · Balance: <b>{me.data.credits_balance.toLocaleString()}</b>{" "}
            credits
          </p>
          <p className="muted small">Member since {formatTime(me.data.created_at)}</p>
        </section>
      )}
      <ApiKeysSection />
      <CredentialsSection />
      <h2>Recent credit movements</h2>
      {ledger.data && (
        <table>
          <TableHead columns={["When", "Kind", "Change", "Run", "Note"]} />
          <tbody>
            {ledger.data.map((entry) => (
              <tr key={entry.id}>
                <td>{formatTime(entry.created_at)}</td>
                <td>{entry.kind}</td>
                <td className="mono">
                  {entry.kind === "charge"
                    ? `(${entry.amount} charged)`
                    : entry.balance_change > 0
                      ? `+${entry.balance_change}`
                      : entry.balance_change}
                </td>
                <td className="mono">
                  {entry.run_id ? shortRunId(entry.run_id) : ""}
                  {entry.node_id ? ` · ${entry.node_id}` : ""}
                </td>
                <td>{entry.note ?? ""}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </main>
  );
}

function ApiKeysSection() {
  const client = useQueryClient();
  const [name, setName] = useState("");
  const [created, setCreated] = useState<ApiKeyCreated | null>(null);
  const [revoking, setRevoking] = useState<ApiKey | null>(null);
  const { error, setError, act } = useAction();
  const list = useQuery({
    queryKey: keys.keys,
    queryFn: async () => unwrap(await api.GET("/api/v1/api-keys")),
  });
  const refresh = () => client.invalidateQueries({ queryKey: keys.keys });

  const generate = () =>
    act(async () => {
      setCreated(unwrap(await api.POST("/api/v1/api-keys", { body: { name: name.trim() } })));
      setName("");
      await refresh();
    });

  const revoke = (key: ApiKey) => {
    setRevoking(null);
    return act(async () => {
      unwrap(
        await api.DELETE("/api/v1/api-keys/{key_id}", { params: { path: { key_id: key.id } } }),
      );
      if (created?.id === key.id) setCreated(null);
      await refresh();
    });
  };

  const active = (list.data ?? []).filter((k) => !k.revoked_at);
  return (
    <section aria-labelledby="api-keys-heading">
      <h2 id="api-keys-heading">API keys</h2>
      <p className="small muted">
        Keys let programs on a server call the API as you (Authorization: Bearer nlk_…). Never put a
        key in a web page or an app that runs on someone else’s device.
      </p>
      <ErrorBanner error={error} />
      <NameForm
        id="key-name"
        label="Key name"
        placeholder="build server"
        value={name}
        onChange={setName}
        onSubmit={() => void generate()}
        submitLabel="Generate key"
        disabled={!name.trim()}
      />
      {created && (
        <div className="card" role="region" aria-label="New API key">
          <p>
            <b>Copy this key now: it is shown only once.</b> The server keeps only a hash of it.
          </p>
          <div className="row">
            <code className="secret" data-testid="new-api-key" style={{ flex: 1 }}>
              {created.key}
            </code>
            <CopyButton text={created.key} onError={setError} />
            <button type="button" onClick={() => setCreated(null)}>
              Done
            </button>
          </div>
        </div>
      )}
      <table>
        <TableHead columns={["Name", "Prefix", "Created", "Last used"]} actions />
        <tbody>
          {active.map((key) => (
            <tr key={key.id}>
              <td>{key.name}</td>
              <td className="mono">{key.prefix}…</td>
              <td>{formatTime(key.created_at)}</td>
              <td>{key.last_used_at ? formatTime(key.last_used_at) : "never"}</td>
              <td style={{ textAlign: "right" }}>
                <button type="button" className="danger" onClick={() => setRevoking(key)}>
                  Revoke
                </button>
              </td>
            </tr>
          ))}
          {active.length === 0 && (
            <tr>
              <td colSpan={5} className="muted">
                No active keys.
              </td>
            </tr>
          )}
        </tbody>
      </table>
      <ConfirmDialog
        open={revoking !== null}
        title={`Revoke “${revoking?.name ?? ""}”?`}
        confirmLabel="Revoke"
        onCancel={() => setRevoking(null)}
        onConfirm={() => revoking && void revoke(revoking)}
      >
        <p>Programs using this key get 401 from their very next request.</p>
      </ConfirmDialog>
    </section>
  );
}
