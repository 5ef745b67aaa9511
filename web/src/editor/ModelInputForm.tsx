import { useEffect, useState } from "react";
import { useModelSchema } from "../api/queries";
import {
  boundFields,
  extraFields,
  inputData,
  modelInputSchema,
  schemaLookup,
  withField,
} from "../credentials/modelSchema";
import { REMOVE, SchemaForm } from "../forms/SchemaForm";
import type { JsonSchema } from "../forms/schema";

const SETTLE_MS = 500; // the model name typed: ask once typing pauses, not per keystroke

function useSettled<T>(value: T): T {
  const [settled, setSettled] = useState(value);
  const key = JSON.stringify(value);
  useEffect(() => {
    const timer = setTimeout(() => setSettled(value), SETTLE_MS);
    return () => clearTimeout(timer);
    // eslint-disable-next-line react-hooks/exhaustive-deps -- compared by value
  }, [key]);
  return settled;
}

/** A Replicate or fal model node's `input` param: the model's own fields as a form, from the schema
 * the server reads with the node's credential; the raw JSON editor while there is no
 * credential or model, or when the schema cannot be read (the reason said). */
export function ModelInputForm({
  id,
  nodeType,
  data,
  inputSchema,
  onChange,
}: {
  id: string;
  nodeType: string;
  data: Record<string, unknown>;
  /** The node's own JSON schema of `input` (the raw editor's). */
  inputSchema: JsonSchema;
  onChange: (value: unknown) => void;
}) {
  const lookup = useSettled(schemaLookup(nodeType, data));
  const schema = useModelSchema(lookup);
  const raw = (
    <SchemaForm
      schema={{ type: "object", properties: { input: inputSchema } }}
      data={data}
      idPrefix={id.replace(/-input$/, "")}
      onChange={(_name, value) => onChange(value)}
    />
  );
  if (lookup === null) return raw;
  if (schema.isPending) {
    return (
      <>
        <p className="muted small" role="status">
          Reading {lookup.model}’s input fields…
        </p>
        {raw}
      </>
    );
  }
  if (schema.isError) {
    return (
      <>
        <p className="small" role="note">
          The model’s input fields cannot be read ({schema.error.message}): edit the input as JSON.
        </p>
        {raw}
      </>
    );
  }
  const bindings =
    data.bindings !== null && typeof data.bindings === "object"
      ? (data.bindings as Record<string, unknown>)
      : {};
  const bound = boundFields(bindings);
  const current = inputData(data.input);
  const extra = extraFields(data.input, schema.data.input as JsonSchema);
  return (
    <fieldset className="model-input" aria-label={`${lookup.model} input`}>
      <legend>
        Input of {schema.data.model}
        {schema.data.version ? (
          <span className="muted small mono"> ({schema.data.version.slice(0, 8)})</span>
        ) : null}
      </legend>
      <SchemaForm
        schema={modelInputSchema(schema.data.input as JsonSchema, bindings)}
        data={current}
        idPrefix={id}
        onChange={(name, value) => onChange(withField(data.input, name, value, value === REMOVE))}
      />
      {bound.length > 0 && (
        <p className="muted small">Set from the node’s inputs: {bound.join(", ")}.</p>
      )}
      {extra.length > 0 && (
        <p className="small" role="note">
          Also sent, though the model does not list them: {extra.join(", ")}.
        </p>
      )}
    </fieldset>
  );
}
