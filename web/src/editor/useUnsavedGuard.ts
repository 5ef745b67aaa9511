import { useEffect } from "react";
import { useBlocker } from "react-router";

/** Unsaved changes are never lost silently: leaving by an in-app link, back or forward is
 * blocked (the caller asks with LeaveDialog); closing or reloading the tab gets the browser's
 * own question. */
export function useUnsavedGuard(dirty: boolean) {
  const blocker = useBlocker(
    ({ currentLocation, nextLocation }) =>
      dirty && currentLocation.pathname !== nextLocation.pathname,
  );
  useEffect(() => {
    if (!dirty) return;
    const onBeforeUnload = (event: BeforeUnloadEvent) => {
      event.preventDefault();
      event.returnValue = "";
    };
    window.addEventListener("beforeunload", onBeforeUnload);
    return () => window.removeEventListener("beforeunload", onBeforeUnload);
  }, [dirty]);
  return blocker;
}
