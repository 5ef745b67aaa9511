import { useState } from "react";
import { useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "../api/client";
import { keys, useCredentialServers } from "../api/queries";
import type { FleetServer } from "../api/types";
import { ErrorBanner, useAction } from "../components/forms";
import { ServerTable } from "../operator/ServerTable";

/** The servers one of the account's comfyui credentials names (a fleet), each with its state
 * and a Drain / Undrain button: a drained server finishes its prompts and gets no new one. */
export function CredentialServers({ credential, name }: { credential: string; name: string }) {
  const client = useQueryClient();
  const query = useCredentialServers(credential);
  const { error, act } = useAction();
  const [pending, setPending] = useState<string | null>(null);
  const drain = (server: FleetServer, draining: boolean) =>
    void act(async () => {
      setPending(server.id);
      try {
        unwrap(
          await api.POST("/api/v1/credentials/{credential_id}/servers/{server_id}/{action}", {
            params: {
              path: {
                credential_id: credential,
                server_id: server.id,
                action: draining ? "drain" : "undrain",
              },
            },
          }),
        );
        await client.invalidateQueries({ queryKey: keys.credentialServers(credential) });
      } finally {
        setPending(null);
      }
    });
  const servers = query.data ?? [];
  if (servers.length === 0 && !error) return null;
  return (
    <div className="credential-servers">
      <ErrorBanner error={error} />
      <ServerTable
        servers={servers}
        label={`Servers of ${name}`}
        onDrain={drain}
        pending={pending}
      />
    </div>
  );
}
