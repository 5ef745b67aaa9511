// "Start from a template": the repository's examples/*.json, bundled at build time (the
// Makefile lists them among the web app's sources, so a changed example rebuilds the bundle).
import type { GraphJson, NodeType } from "../api/types";

interface ExampleFile {
  name: string;
  description?: string;
  input?: Record<string, unknown>;
  graph_json: GraphJson;
}

export interface Template {
  /** The file's base name, e.g. "narrated-video". */
  id: string;
  name: string;
  description: string;
  input: Record<string, unknown> | null;
  graph: GraphJson;
}

const FILES = import.meta.glob<ExampleFile>("../../../examples/*.json", {
  eager: true,
  import: "default",
});

/** The templates from the given example files, smallest graph first. */
export function templatesFrom(files: Record<string, ExampleFile>): Template[] {
  return Object.entries(files)
    .map(([path, file]) => ({
      id: path.replace(/^.*\//, "").replace(/\.json$/, ""),
      name: file.name,
      description: file.description ?? "",
      input: file.input ?? null,
      graph: file.graph_json,
    }))
    .sort((a, b) => a.graph.nodes.length - b.graph.nodes.length || a.name.localeCompare(b.name));
}

export const TEMPLATES: Template[] = templatesFrom(FILES);

/** The node types of a template this server cannot run (unknown, or unavailable such as a
 * provider node without a configured provider), by title. */
export function unavailableTypes(template: Template, catalog: Map<string, NodeType>): string[] {
  const missing = new Set<string>();
  for (const n of template.graph.nodes) {
    const spec = catalog.get(n.type);
    if (!spec) missing.add(n.type);
    else if (!spec.available) missing.add(spec.title);
  }
  return [...missing].sort();
}
