import { useState } from "react";
import {
  boundsProblem,
  displayValue,
  formFields,
  parseInput,
  type FormField,
  type JsonSchema,
} from "./schema";

export const REMOVE = Symbol("remove");

/** A node's params as a form generated from its JSON Schema. */
export function SchemaForm({
  schema,
  nodeType,
  data,
  idPrefix,
  onChange,
  overrides = {},
}: {
  schema: JsonSchema;
  /** The node type, for its field order (FIELD_ORDER). */
  nodeType?: string;
  data: Record<string, unknown>;
  idPrefix: string;
  onChange: (name: string, value: unknown) => void;
  /** Fields drawn by another control (the credential picker), by param name. */
  overrides?: Readonly<Record<string, (id: string) => React.ReactNode>>;
}) {
  const fields = formFields(schema, nodeType);
  if (fields.length === 0) return <p className="muted small">This node has no parameters.</p>;
  return (
    <>
      {fields.map((field) =>
        overrides[field.name] ? (
          <div key={`${idPrefix}-${field.name}`}>
            {overrides[field.name]?.(`${idPrefix}-${field.name}`)}
          </div>
        ) : (
          <SchemaField
            key={`${idPrefix}-${field.name}`}
            id={`${idPrefix}-${field.name}`}
            field={field}
            data={data}
            onChange={onChange}
          />
        ),
      )}
    </>
  );
}

function SchemaField({
  id,
  field,
  data,
  onChange,
}: {
  id: string;
  field: FormField;
  data: Record<string, unknown>;
  onChange: (name: string, value: unknown) => void;
}) {
  const [draft, setDraft] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  const shown = displayValue(field, data);
  const commit = (raw: string | boolean) => {
    const parsed = parseInput(field, raw);
    if (!parsed.ok) {
      setError(parsed.error);
      return;
    }
    setError(null);
    if ("remove" in parsed) onChange(field.name, REMOVE);
    else {
      setError(boundsProblem(field, parsed.value));
      onChange(field.name, parsed.value);
    }
  };
  const described = `${id}-hint`;
  const common = {
    id,
    "aria-describedby": described,
    "aria-invalid": error ? true : undefined,
  } as const;
  let control: React.ReactNode;
  if (field.kind === "boolean") {
    control = (
      <input
        {...common}
        type="checkbox"
        checked={shown === true}
        onChange={(e) => commit(e.target.checked)}
      />
    );
  } else if (field.kind === "select") {
    control = (
      <select {...common} value={String(shown)} onChange={(e) => commit(e.target.value)}>
        {field.options.map((option) => (
          <option key={option} value={option}>
            {option}
          </option>
        ))}
      </select>
    );
  } else {
    const value = draft ?? String(shown);
    const onText = (text: string) => {
      setDraft(text);
      commit(text);
    };
    control =
      field.kind === "textarea" || field.kind === "json" ? (
        <textarea
          {...common}
          value={value}
          maxLength={field.maxLength}
          placeholder={
            field.default === null || field.default === undefined ? "" : String(field.default)
          }
          onChange={(e) => onText(e.target.value)}
          onBlur={() => setDraft(null)}
        />
      ) : (
        <input
          {...common}
          type={field.kind === "integer" || field.kind === "number" ? "number" : "text"}
          step={field.kind === "integer" ? 1 : "any"}
          min={field.min}
          max={field.max}
          maxLength={field.maxLength}
          value={value}
          placeholder={
            field.default === null || field.default === undefined ? "" : String(field.default)
          }
          onChange={(e) => onText(e.target.value)}
          onBlur={() => setDraft(null)}
        />
      );
  }
  return (
    <div className="field">
      <label htmlFor={id}>{field.label}</label>
      {control}
      <div className="hint" id={described}>
        {field.description}
        {field.min !== undefined || field.max !== undefined
          ? ` (${field.min ?? "…"} to ${field.max ?? "…"})`
          : ""}
      </div>
      {error && <div className="error">{error}</div>}
    </div>
  );
}
