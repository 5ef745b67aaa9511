// Node packages in the palette: which package a type comes from, the package filter's choices
// and the filter itself. Built-in types have no package. Pure, so unit-tested.
import type { NodeType } from "../api/types";
import { takesCredential } from "../credentials/kinds";

export const ALL_PACKAGES = "";
export const BUILT_IN = "builtin";

export interface PackageChoice {
  value: string;
  label: string;
}

/** The badge of a packaged type, "watermark 0.1.0" (its namespace and release); null when
 * built in. */
export function packageBadge(type: NodeType): string | null {
  return type.package ? `${type.package.namespace} ${type.package.version}` : null;
}

/** The filter's choices: All, Built-in, then each installed package by name. A package
 * appears once even when several of its types are listed. */
export function packageChoices(types: readonly NodeType[]): PackageChoice[] {
  const packages = new Map<string, PackageChoice>();
  for (const t of types) {
    if (t.package && !packages.has(t.package.name)) {
      packages.set(t.package.name, {
        value: t.package.name,
        label: `${t.package.name} ${t.package.version}`,
      });
    }
  }
  return [
    { value: ALL_PACKAGES, label: "All" },
    { value: BUILT_IN, label: "Built-in" },
    ...[...packages.values()].sort((a, b) => a.value.localeCompare(b.value)),
  ];
}

/** The types of the chosen package (its distribution name), the built-in ones, or all. A
 * filter naming a package no longer listed keeps nothing, rather than silently showing all. */
export function filterByPackage(types: readonly NodeType[], choice: string): NodeType[] {
  if (choice === ALL_PACKAGES) return [...types];
  if (choice === BUILT_IN) return types.filter((t) => !t.package);
  return types.filter((t) => t.package?.name === choice);
}

/** Why a type cannot be added, or null when it can. */
export function unavailableReason(type: NodeType): string | null {
  if (type.available && type.status !== "unavailable") return null;
  return type.unavailable_reason ?? "unavailable on this server";
}

/** What the palette says about a type that cannot run as it stands, and whether it can be
 * added anyway: a provider node unavailable for want of the operator's provider can still
 * run with one of the account's credentials, so it stays addable, with that said. */
export function paletteNote(type: NodeType): { text: string; blocked: boolean } | null {
  const reason = unavailableReason(type);
  if (reason === null) return null;
  if (takesCredential(type.params_schema)) {
    return { text: "No default provider here: pick one of your credentials.", blocked: false };
  }
  return { text: reason, blocked: true };
}
