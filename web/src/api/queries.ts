// Server state through TanStack Query: one hook per read, keys in one place.
import { useQuery } from "@tanstack/react-query";
import { api, unwrap } from "./client";
import { fromServer } from "../credentials/kinds";
import type { NodeType } from "./types";

export const keys = {
  me: ["me"] as const,
  setup: ["setup"] as const,
  nodeTypes: ["node-types"] as const,
  workflows: ["workflows"] as const,
  workflow: (id: string) => ["workflow", id] as const,
  runs: (workflowId?: string) => ["runs", workflowId ?? "all"] as const,
  run: (workflowId: string, runId: string) => ["run", workflowId, runId] as const,
  keys: ["api-keys"] as const,
  credentials: ["credentials"] as const,
  credentialKinds: ["credential-kinds"] as const,
  modelSchema: (credential: string, model: string) => ["model-schema", credential, model] as const,
  ledger: ["ledger"] as const,
  webhooks: (workflowId: string) => ["webhooks", workflowId] as const,
  versions: (workflowId: string) => ["versions", workflowId] as const,
  version: (workflowId: string, version: number) => ["version", workflowId, version] as const,
  schedules: (workflowId: string) => ["schedules", workflowId] as const,
};

export function useMe() {
  return useQuery({ queryKey: keys.me, queryFn: async () => unwrap(await api.GET("/api/v1/me")) });
}

export function useNodeTypes() {
  return useQuery({
    queryKey: keys.nodeTypes,
    staleTime: Infinity,
    queryFn: async () => unwrap(await api.GET("/api/v1/node-types")),
  });
}

export function catalogMap(types: NodeType[] | undefined): Map<string, NodeType> {
  return new Map((types ?? []).map((t) => [t.type, t]));
}

/** The account's credentials (the first 200: the picker and the profile list show them all). */
/** The credential kinds the server stores, with their fields (they change only with the
 * server, so fetched once). */
export function useCredentialKinds() {
  return useQuery({
    queryKey: keys.credentialKinds,
    staleTime: Infinity,
    queryFn: async () => fromServer(unwrap(await api.GET("/api/v1/credential-kinds"))),
  });
}

export function useCredentials() {
  return useQuery({
    queryKey: keys.credentials,
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/credentials", { params: { query: { limit: 200 } } })),
  });
}

/** A hosted model's published input schema, read by the server with the node's credential
 * (null: nothing to ask). Not retried: a refusal (unknown model, refused token) is shown at
 * once and the form falls back to the raw JSON editor. */
export function useModelSchema(lookup: { credential: string; model: string } | null) {
  return useQuery({
    queryKey: keys.modelSchema(lookup?.credential ?? "", lookup?.model ?? ""),
    enabled: lookup !== null,
    retry: false,
    staleTime: 60_000,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/credentials/{credential_id}/model-schema", {
          params: {
            path: { credential_id: lookup?.credential ?? "" },
            query: { model: lookup?.model ?? "" },
          },
        }),
      ),
  });
}
