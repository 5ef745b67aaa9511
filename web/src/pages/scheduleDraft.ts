// The schedule form's fields as typed, and the one conversion that needs care: the input.

export interface ScheduleDraft {
  name: string;
  cron: string;
  timezone: string;
  input: string;
  callbackUrl: string;
  active: boolean;
}

/** The run input typed in the form: null when empty, the object when it is a JSON object,
 * else a message saying what is wrong (shown instead of sending the request). */
export function parseScheduleInput(text: string): Record<string, unknown> | null | string {
  if (!text.trim()) return null;
  let value: unknown;
  try {
    value = JSON.parse(text);
  } catch {
    return "The input is not valid JSON.";
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    return 'The input must be a JSON object, such as {"text": "today"}.';
  }
  return value as Record<string, unknown>;
}
