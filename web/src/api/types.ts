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
export type ArtifactMetadata = Schemas["ArtifactMetadata"];
export type Webhook = Schemas["WebhookOut"];
export type RunEstimate = Schemas["RunEstimate"];
export type SetupStatus = Schemas["SetupStatus"];
export type RunStatus = RunSummary["status"];
export type NodeStatus = NodeRun["status"];
export type Kind = NodeInput["kind"];

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
