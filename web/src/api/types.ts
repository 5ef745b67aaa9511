// Names for the shapes of our OpenAPI document. schema.d.ts is generated from the server's
// document at build time (npm run generate), so these never drift from the API.
import type { components } from "./schema";

type Schemas = components["schemas"];

export type Account = Schemas["AccountOut"];
export type ApiKey = Schemas["ApiKeyOut"];
export type ApiKeyCreated = Schemas["ApiKeyCreated"];
export type LedgerEntry = Schemas["LedgerEntryOut"];
export type NodeType = Schemas["NodeTypeOut"];
export type NodeInput = Schemas["NodeInputOut"];
export type WorkflowSummary = Schemas["WorkflowSummary"];
export type Workflow = Schemas["WorkflowOut"];
export type RunSummary = Schemas["RunSummary"];
export type RunListItem = Schemas["RunListItem"];
export type Run = Schemas["RunOut"];
export type NodeRun = Schemas["NodeRunOut"];
export type PoolServer = Schemas["PoolServerOut"];
export type FleetServer = Schemas["FleetServerOut"];
export type ArtifactMetadata = Schemas["ArtifactMetadata"];
export type Webhook = Schemas["WebhookOut"];
export type Schedule = Schemas["ScheduleOut"];
export type Approval = Schemas["ApprovalOut"];
export type RunEstimate = Schemas["RunEstimate"];
export type SetupStatus = Schemas["SetupStatus"];
export type Credential = Schemas["CredentialOut"];
export type CredentialTestResult = Schemas["CredentialTestResult"];
export type CredentialKindInfo = Schemas["CredentialKindOut"];
export type NodePackage = Schemas["NodePackageOut"];
export type Asset = Schemas["AssetOut"];
export type Storage = Schemas["StorageOut"];
/** A run's status. `cancelled` is added here, the one place, for servers whose document does
 * not list it yet; once it does, the union is unchanged and this line can stay as it is. */
export type RunStatus = RunSummary["status"] | "cancelled";
export type NodeStatus = NodeRun["status"];
export type Kind = NodeInput["kind"];

/** Something the server accepted but wants said: a JSON pointer into the request body and a
 * message (an unavailable node type, say). Saves answer with a list of them. */
export interface Warning {
  pointer: string;
  message: string;
}
/** A created or updated workflow as the server answers the save: `warnings` is always sent
 * by servers that know it (older ones leave it out). */
export type SavedWorkflow = Workflow & { warnings?: Warning[] };

/** graph_json as stored: React Flow's saved shape; nodes and edges keep any extra fields. */
export interface GraphNode {
  id: string;
  type: string;
  position: { x: number; y: number };
  data: Record<string, unknown>;
  [extra: string]: unknown;
}
export interface GraphEdge {
  id: string;
  source: string;
  target: string;
  sourceHandle?: string | null;
  targetHandle?: string | null;
  [extra: string]: unknown;
}
export interface Viewport {
  x: number;
  y: number;
  zoom: number;
}
export interface GraphJson {
  nodes: GraphNode[];
  edges: GraphEdge[];
  viewport: Viewport;
  [extra: string]: unknown;
}

/** An RFC 9457 problem as the API sends it. */
export interface Problem {
  type?: string;
  title?: string;
  status: number;
  detail?: string;
  code?: string;
  errors?: { pointer: string; message: string }[];
}

export type WorkflowVersionSummary = Schemas["WorkflowVersionSummary"];
export type WorkflowVersion = Schemas["WorkflowVersionOut"];
