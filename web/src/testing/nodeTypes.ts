import type { NodeType } from "../api/types";

/** A node type as the server lists it, for the component tests. */
export function nodeType(type: string, overrides: Record<string, unknown> = {}): NodeType {
  return {
    type,
    category: "text",
    title: type,
    description: "",
    available: true,
    cost: { credits: 1, per_second: 0 },
    inputs: [],
    output: { kind: "text" },
    params_schema: {},
    version: 1,
    ...overrides,
  } as unknown as NodeType;
}
