// A node whose type is not in the catalog at all: its package was uninstalled (or disabled)
// since the workflow was saved. The canvas draws a placeholder and changes nothing about it:
// its type and data go back to the server exactly as they came (see convert.ts).

export const UNKNOWN_NOTE =
  "Its node package is not installed on this server, so it cannot run; its parameters are kept as they are.";

export function unknownTitle(type: string): string {
  return `Unknown node (${type})`;
}
