/** A run's or node's status as a coloured dot and a word; a completed node whose output was
 * reused from an earlier run says "cached". */
export function Status({
  status,
  cached,
}: {
  status: string | null | undefined;
  cached?: boolean;
}) {
  if (!status) return <span className="muted small">never run</span>;
  const shown =
    cached && status === "completed" ? "cached" : status === "pending" ? "queued" : status;
  return (
    <span
      className="status"
      data-status={shown}
      title={shown === "cached" ? CACHED_NOTE : undefined}
    >
      {shown}
    </span>
  );
}

export const CACHED_NOTE = "Cached: the output of an earlier identical run was reused, at no cost.";

/** What a node cost, saying so when 0 credits means its output came from the cache. */
export function creditsLabel(credits: number | undefined, cached: boolean | undefined): string {
  const amount = `${credits ?? 0} credit${credits === 1 ? "" : "s"}`;
  return cached ? `${amount} (cached: output reused)` : amount;
}

export function formatTime(value: string | null | undefined): string {
  if (!value) return "—";
  return new Date(value).toLocaleString();
}

export function formatDuration(ms: number | null | undefined): string {
  if (ms === null || ms === undefined) return "—";
  if (ms < 1000) return `${ms} ms`;
  const seconds = ms / 1000;
  return seconds < 60
    ? `${seconds.toFixed(1)} s`
    : `${Math.floor(seconds / 60)} min ${Math.round(seconds % 60)} s`;
}

export const TRIGGER_LABEL: Record<string, string> = {
  api: "API",
  webhook: "Webhook",
  editor: "Editor",
  schedule: "Schedule",
  app: "App",
};
