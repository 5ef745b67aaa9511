/**
 * A run's short name. Our ids are UUIDv7: the first 12 hex digits are the creation time in
 * milliseconds, so the first 8 are the same for every run made within about a minute (a run
 * and its retry were both "Run 01a21e21"). The last 8 are random.
 */
export function shortRunId(id: string): string {
  return id.replace(/-/g, "").slice(-8);
}
