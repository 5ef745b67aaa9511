// Server state through TanStack Query: one hook per read, keys in one place.
import { useMemo } from "react";
import { useQueries, useQuery } from "@tanstack/react-query";
import {
  WORKFLOW_TYPE,
  childInterface,
  withChildren,
  type ChildInterface,
} from "../graph/subworkflow";
import { withApprovalKinds } from "../graph/approval";
import { withHttpRequestKinds } from "../graph/httpRequest";
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
  assets: (kind?: string) => ["assets", kind ?? "all"] as const,
  storage: ["storage"] as const,
  approvals: ["approvals"] as const,
  comfyuiServers: ["operator", "comfyui-servers"] as const,
  credentialServers: (credential: string) => ["credential-servers", credential] as const,
  /** The account's apps, or one workflow's (a prefix of every apps key: invalidate apps()). */
  apps: (workflowId?: string) => (workflowId ? ["apps", workflowId] : ["apps"]),
};

export function useMe() {
  return useQuery({ queryKey: keys.me, queryFn: async () => unwrap(await api.GET("/api/v1/me")) });
}

/** The account's approvals waiting for a person (the inbox and the badge in the nav). Read
 * again every 15 s: a run anywhere may start waiting. */
export function useApprovals() {
  return useQuery({
    queryKey: keys.approvals,
    refetchInterval: 15_000,
    queryFn: async () => unwrap(await api.GET("/api/v1/approvals")),
  });
}

/** Every ComfyUI server (the shared pool's and the accounts'), for the operator page: read
 * again every 5 s (the processes report every 5 s). */
export function useComfyUIServers() {
  return useQuery({
    queryKey: keys.comfyuiServers,
    refetchInterval: 5_000,
    retry: false, // a 403 (not an operator) stays one
    queryFn: async () => unwrap(await api.GET("/api/v1/operator/comfyui-servers")),
  });
}

/** The servers of one of the account's comfyui credentials (a fleet), read every 5 s. */
export function useCredentialServers(credential: string) {
  return useQuery({
    queryKey: keys.credentialServers(credential),
    refetchInterval: 5_000,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/credentials/{credential_id}/servers", {
          params: { path: { credential_id: credential } },
        }),
      ),
  });
}

export function useNodeTypes() {
  return useQuery({
    queryKey: keys.nodeTypes,
    staleTime: Infinity,
    queryFn: async () => unwrap(await api.GET("/api/v1/node-types")),
  });
}

export function catalogMap(types: NodeType[] | undefined): Map<string, NodeType> {
  return withHttpRequestKinds(withApprovalKinds(new Map((types ?? []).map((t) => [t.type, t]))));
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

/** The account's workflows (the first 200), for the Workflow node's picker. */
export function useWorkflowChoices() {
  return useQuery({
    queryKey: [...keys.workflows, "choices"],
    queryFn: async () =>
      unwrap(await api.GET("/api/v1/workflows", { params: { query: { limit: 200 } } })),
  });
}

/** `catalog` with a spec bound to the child of every Workflow node among `nodes`
 * (graph/subworkflow.ts): each child workflow is read once, and again when it changes. */
export function useChildCatalog(
  catalog: Map<string, NodeType>,
  nodes: { type?: string; data?: Record<string, unknown> }[],
): Map<string, NodeType> {
  const ids = [
    ...new Set(
      nodes
        .filter((n) => n.type === WORKFLOW_TYPE && typeof n.data?.workflow_id === "string")
        .map((n) => String(n.data?.workflow_id)),
    ),
  ].sort();
  const results = useQueries({
    queries: ids.map((id) => ({
      queryKey: keys.workflow(id),
      retry: false,
      queryFn: async () =>
        unwrap(
          await api.GET("/api/v1/workflows/{workflow_id}", {
            params: { path: { workflow_id: id } },
          }),
        ),
    })),
  });
  const stamp = results.map((r) => r.dataUpdatedAt).join(",");
  return useMemo(() => {
    const children = new Map<string, ChildInterface>();
    results.forEach((r, i) => {
      const id = ids[i];
      if (id && r.data) children.set(id, childInterface(r.data.graph_json as never, catalog));
    });
    return withChildren(catalog, children);
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [catalog, ids.join(","), stamp]);
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

/** The account's assets, newest first (the first 200), of one kind or all. */
export function useAssets(kind?: "image" | "audio" | "video", enabled = true) {
  return useQuery({
    queryKey: keys.assets(kind),
    enabled,
    queryFn: async () =>
      unwrap(
        await api.GET("/api/v1/assets", {
          params: { query: { limit: 200, ...(kind ? { kind } : {}) } },
        }),
      ),
  });
}

/** The account's storage: used, quota, largest file. */
export function useStorage() {
  return useQuery({
    queryKey: keys.storage,
    queryFn: async () => unwrap(await api.GET("/api/v1/storage")),
  });
}
