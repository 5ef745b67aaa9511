import { useEffect, useState } from "react";

/** A short message over the canvas (a refused connection, a copy), gone after four seconds. */
export function useToast() {
  const [toast, setToast] = useState<string | null>(null);
  useEffect(() => {
    if (!toast) return;
    const timer = setTimeout(() => setToast(null), 4000);
    return () => clearTimeout(timer);
  }, [toast]);
  return [toast, setToast] as const;
}
