import type { Asset } from "../api/types";
import {
  MAX_CHALLENGE_BITS,
  type AppDraft,
  type DraftProblem,
  type FieldDraft,
  type OutputDraft,
  type PasswordChoice,
} from "../apps/publish";

const ACCESS = [
  ["private", "Private: only you, signed in"],
  ["link", "Anyone with the link"],
  ["public", "Public"],
] as const;

/** The limits: label, the body's field (for the problems), the draft's, and whether empty
 * means "no limit". */
const LIMITS: [string, string, NumericDraftField, boolean][] = [
  ["Credits per day", "budget_daily", "budgetDaily", true],
  ["Credits in all", "budget_total", "budgetTotal", true],
  ["Runs at once", "max_concurrent", "maxConcurrent", true],
  ["Runs per visitor per hour", "rate_per_visitor", "ratePerVisitor", false],
  ["Runs per address per hour", "rate_per_ip", "ratePerIp", false],
];
type NumericDraftField =
  "budgetDaily" | "budgetTotal" | "maxConcurrent" | "ratePerVisitor" | "ratePerIp";

/** The controls of the "Publish as app" form; the dialog owns the draft. */
export function AppFormFields({
  draft,
  onDraft,
  problems,
  covers,
}: {
  draft: AppDraft;
  onDraft: (draft: AppDraft) => void;
  problems: DraftProblem[];
  covers: Asset[];
}) {
  const set = (change: Partial<AppDraft>) => onDraft({ ...draft, ...change });
  const setField = (key: string, change: Partial<FieldDraft>) =>
    set({ fields: draft.fields.map((f) => (f.key === key ? { ...f, ...change } : f)) });
  const setOutput = (nodeId: string, change: Partial<OutputDraft>) =>
    set({ outputs: draft.outputs.map((o) => (o.nodeId === nodeId ? { ...o, ...change } : o)) });
  const wrong = (name: string) => problems.some((p) => p.field === name) || undefined;
  const cover = covers.find((a) => a.id === draft.coverAssetId);
  return (
    <>
      <div className="field">
        <label htmlFor="app-title">Title</label>
        <input
          id="app-title"
          value={draft.title}
          maxLength={200}
          aria-invalid={wrong("title")}
          onChange={(e) => set({ title: e.target.value })}
        />
      </div>
      <div className="field">
        <label htmlFor="app-description">Description</label>
        <textarea
          id="app-description"
          value={draft.description}
          maxLength={10_000}
          onChange={(e) => set({ description: e.target.value })}
        />
      </div>
      <div className="field">
        <label htmlFor="app-cover">Cover image</label>
        <div className="row">
          <select
            id="app-cover"
            className="grow"
            value={draft.coverAssetId}
            onChange={(e) => set({ coverAssetId: e.target.value })}
          >
            <option value="">None</option>
            {covers.map((a) => (
              <option key={a.id} value={a.id}>
                {a.name}
              </option>
            ))}
          </select>
          {cover?.thumbnail_url && (
            <img className="publish-cover" src={cover.thumbnail_url} alt="" />
          )}
        </div>
        <div className="hint">An image from your assets (upload one on the Assets page).</div>
      </div>

      <fieldset className="model-input">
        <legend>Form fields</legend>
        {draft.fields.length === 0 && (
          <p className="small muted">
            This workflow has no input node: the app runs it without input.
          </p>
        )}
        {draft.fields.map((f) => (
          <div key={f.key} className="publish-item" data-key={f.key}>
            <label className="row small">
              <input
                type="checkbox"
                checked={f.shown}
                onChange={(e) => setField(f.key, { shown: e.target.checked })}
              />
              Show input “{f.key}” ({f.kind})
            </label>
            {f.shown && (
              <div className="publish-grid">
                <label>
                  Label
                  <input
                    value={f.label}
                    maxLength={200}
                    onChange={(e) => setField(f.key, { label: e.target.value })}
                  />
                </label>
                <label>
                  Help text
                  <input
                    value={f.help}
                    maxLength={2000}
                    onChange={(e) => setField(f.key, { help: e.target.value })}
                  />
                </label>
                {f.kind === "text" && (
                  <>
                    <label>
                      Default
                      <input
                        value={f.default}
                        aria-invalid={wrong(`default:${f.key}`)}
                        onChange={(e) => setField(f.key, { default: e.target.value })}
                      />
                    </label>
                    <label>
                      Longest text
                      <input
                        inputMode="numeric"
                        value={f.maxLength}
                        aria-invalid={wrong(`max_length:${f.key}`)}
                        onChange={(e) => setField(f.key, { maxLength: e.target.value })}
                      />
                    </label>
                  </>
                )}
                <label className="row">
                  <input
                    type="checkbox"
                    checked={f.required}
                    onChange={(e) => setField(f.key, { required: e.target.checked })}
                  />
                  Required
                </label>
              </div>
            )}
          </div>
        ))}
      </fieldset>

      <fieldset className="model-input" aria-invalid={wrong("outputs")}>
        <legend>Outputs shown</legend>
        {draft.outputs.map((o) => (
          <div key={o.nodeId} className="publish-item" data-node={o.nodeId}>
            <label className="row small">
              <input
                type="checkbox"
                checked={o.shown}
                onChange={(e) => setOutput(o.nodeId, { shown: e.target.checked })}
              />
              Show {o.title}
            </label>
            {o.shown && (
              <label>
                Label
                <input
                  value={o.label}
                  placeholder={o.nodeId}
                  maxLength={200}
                  onChange={(e) => setOutput(o.nodeId, { label: e.target.value })}
                />
              </label>
            )}
          </div>
        ))}
      </fieldset>

      <fieldset className="model-input">
        <legend>Who may use it</legend>
        {ACCESS.map(([value, text]) => (
          <label key={value} className="row small">
            <input
              type="radio"
              name="app-access"
              value={value}
              checked={draft.access === value}
              onChange={() => set({ access: value })}
            />
            {text}
          </label>
        ))}
        <div className="field">
          <label htmlFor="app-password-choice">Password</label>
          <select
            id="app-password-choice"
            value={draft.password}
            onChange={(e) => set({ password: e.target.value as PasswordChoice })}
          >
            {draft.password === "keep" && <option value="keep">Keep the current password</option>}
            <option value="none">No password</option>
            <option value="set">Set a password</option>
          </select>
          {draft.password === "set" && (
            <input
              type="password"
              aria-label="App password"
              autoComplete="new-password"
              value={draft.passwordValue}
              aria-invalid={wrong("password")}
              onChange={(e) => set({ passwordValue: e.target.value })}
            />
          )}
        </div>
        <div className="field">
          <Numeric
            label="Proof of work (bits)"
            hint="Empty: none"
            value={draft.challengeBits}
            invalid={wrong("challenge_bits")}
            onChange={(v) => set({ challengeBits: v })}
          />
          <div className="hint">
            Each run makes the visitor’s browser find a hash with this many leading zero bits (1–
            {MAX_CHALLENGE_BITS}; 16 takes well under a second): cheap for a person, costly for a
            script sending thousands. For public apps.
          </div>
        </div>
      </fieldset>

      <fieldset className="model-input">
        <legend>Budgets and limits</legend>
        <div className="publish-grid">
          {LIMITS.map(([label, name, field, optional]) => (
            <Numeric
              key={name}
              label={label}
              hint={optional ? "Empty: no limit" : undefined}
              value={draft[field]}
              invalid={wrong(name)}
              onChange={(v) => set({ [field]: v } as Partial<AppDraft>)}
            />
          ))}
        </div>
      </fieldset>

      <div className="field">
        <label htmlFor="app-origins">Embedding: sites that may show it in a frame</label>
        <textarea
          id="app-origins"
          value={draft.frameAncestors}
          placeholder="https://shop.example.com"
          aria-invalid={wrong("frame_ancestors")}
          onChange={(e) => set({ frameAncestors: e.target.value })}
        />
        <div className="hint">One origin a line (scheme://host[:port]); empty: none.</div>
      </div>
    </>
  );
}

function Numeric({
  label,
  hint,
  value,
  invalid,
  onChange,
}: {
  label: string;
  hint?: string;
  value: string;
  invalid: true | undefined;
  onChange: (value: string) => void;
}) {
  return (
    <label>
      {label}
      <input
        inputMode="numeric"
        value={value}
        placeholder={hint}
        aria-invalid={invalid}
        onChange={(e) => onChange(e.target.value)}
      />
    </label>
  );
}
