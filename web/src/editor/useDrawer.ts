import { useEffect, useState } from "react";

export type Drawer = "palette" | "details" | null;

/** Which side panel is open as a drawer (narrow screens). An opened drawer takes the focus, so
 * the keyboard continues there. */
export function useDrawer() {
  const [drawer, setDrawer] = useState<Drawer>(null);
  useEffect(() => {
    if (drawer === "palette") document.getElementById("palette-search")?.focus();
    if (drawer === "details")
      document.querySelector<HTMLElement>("#editor-details .drawer-close")?.focus();
  }, [drawer]);
  return [drawer, setDrawer] as const;
}
