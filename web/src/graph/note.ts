// Sticky notes: nodes of this type are kept in graph_json and drawn on the canvas, but the
// server never runs, estimates or connects them (docs/webapp.md, "Sticky notes").
export const NOTE_TYPE = "Note";

export function isNote(node: { type?: unknown }): boolean {
  return node.type === NOTE_TYPE;
}
