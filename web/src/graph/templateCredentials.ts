// A template (examples/*.json) that calls a provider carries a placeholder where the id of
// the user's credential goes ("REPLACE-WITH-YOUR-COMFYUI-CREDENTIAL-ID"): the gallery asks
// for the credential and puts its id in before the workflow is created.
import type { GraphJson, NodeType } from "../api/types";
import { nodeCredentialKinds, takesCredential } from "../credentials/kinds";

/** One credential a template needs: its placeholder, the kinds that fit, the nodes using it. */
export interface CredentialSlot {
  placeholder: string;
  kinds: readonly string[];
  nodeIds: string[];
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

/** The credentials a template's graph needs: each `credential` param that holds something
 * other than a credential id, by placeholder (one choice fills every node that shares it). */
export function credentialSlots(
  graph: GraphJson,
  catalog: Map<string, NodeType>,
): CredentialSlot[] {
  const slots = new Map<string, CredentialSlot>();
  for (const node of graph.nodes) {
    const value = (node.data as Record<string, unknown> | undefined)?.credential;
    const spec = catalog.get(node.type);
    if (typeof value !== "string" || value === "" || UUID.test(value) || !spec) continue;
    if (!takesCredential(spec.params_schema)) continue;
    const slot = slots.get(value);
    if (slot) slot.nodeIds.push(node.id);
    else
      slots.set(value, {
        placeholder: value,
        kinds: nodeCredentialKinds(spec),
        nodeIds: [node.id],
      });
  }
  return [...slots.values()];
}

/** The graph with each placeholder of `chosen` replaced by the credential id chosen for it. */
export function withCredentials(graph: GraphJson, chosen: Record<string, string>): GraphJson {
  return {
    ...graph,
    nodes: graph.nodes.map((node) => {
      const data = node.data as Record<string, unknown> | undefined;
      const value = data?.credential;
      if (typeof value !== "string" || !(value in chosen)) return node;
      return { ...node, data: { ...data, credential: chosen[value] } };
    }),
  };
}
