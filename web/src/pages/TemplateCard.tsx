import { useState } from "react";
import { Link } from "react-router";
import { useCredentials } from "../api/queries";
import type { GraphJson, NodeType } from "../api/types";
import { ErrorBanner, useAction } from "../components/forms";
import { maskedSecret } from "../credentials/kinds";
import { credentialSlots, withCredentials } from "../graph/templateCredentials";
import { type Template, unavailableTypes } from "../graph/templates";

/** One template of the gallery. A template that calls a provider asks, in its card, which
 * of the account's credentials each of its provider nodes uses before the workflow is
 * created; whatever goes wrong is said in the card that was clicked, not at the page's top. */
export function TemplateCard({
  template,
  catalog,
  catalogLoaded,
  onCreate,
}: {
  template: Template;
  catalog: Map<string, NodeType>;
  catalogLoaded: boolean;
  onCreate: (name: string, graph: GraphJson) => Promise<unknown>;
}) {
  const [choosing, setChoosing] = useState(false);
  const [chosen, setChosen] = useState<Record<string, string>>({});
  const { error, act } = useAction();
  const missing = catalogLoaded ? unavailableTypes(template, catalog) : [];
  const slots = catalogLoaded ? credentialSlots(template.graph, catalog) : [];
  const label = `Use template ${template.name}`;
  const create = () => act(() => onCreate(template.name, withCredentials(template.graph, chosen)));
  return (
    <li className="card template">
      <h3>{template.name}</h3>
      <p className="small muted">{template.description}</p>
      <p className="small muted">
        {template.graph.nodes.length} nodes
        {missing.length > 0 && (
          <span className="warn-text"> · needs {missing.join(", ")}, unavailable here</span>
        )}
      </p>
      <ErrorBanner error={error} />
      {choosing ? (
        <form
          aria-label={`Credentials for ${template.name}`}
          onSubmit={(e) => {
            e.preventDefault();
            void create();
          }}
        >
          {slots.map((slot, i) => (
            <CredentialChoice
              key={slot.placeholder}
              id={`${template.id}-credential-${i}`}
              kinds={slot.kinds}
              nodes={slot.nodeIds}
              value={chosen[slot.placeholder] ?? ""}
              onChange={(id) => setChosen({ ...chosen, [slot.placeholder]: id })}
            />
          ))}
          <div className="row">
            <button
              type="submit"
              className="primary"
              disabled={slots.some((s) => !chosen[s.placeholder])}
            >
              Create workflow
            </button>
            <button type="button" onClick={() => setChoosing(false)}>
              Cancel
            </button>
          </div>
        </form>
      ) : (
        <button
          type="button"
          aria-label={label}
          // The catalog says which nodes take a credential: wait for it.
          disabled={!catalogLoaded}
          onClick={() => (slots.length > 0 ? setChoosing(true) : void create())}
        >
          Use template
        </button>
      )}
    </li>
  );
}

function CredentialChoice({
  id,
  kinds,
  nodes,
  value,
  onChange,
}: {
  id: string;
  kinds: readonly string[];
  nodes: string[];
  value: string;
  onChange: (id: string) => void;
}) {
  const credentials = useCredentials();
  const usable = (credentials.data ?? []).filter((c) => kinds.includes(c.kind));
  return (
    <div className="field">
      <label htmlFor={id}>{kinds.join(" or ")} credential</label>
      <select id={id} value={value} onChange={(e) => onChange(e.target.value)}>
        <option value="" disabled>
          Choose a credential
        </option>
        {usable.map((c) => (
          <option key={c.id} value={c.id}>
            {c.name} ({maskedSecret(c.hint)})
          </option>
        ))}
      </select>
      <div className="hint">
        Used by {nodes.join(", ")}.{" "}
        {credentials.isSuccess &&
          usable.length === 0 &&
          `You have no ${kinds.join(" or ")} credential yet. `}
        <Link to="/profile#credentials-heading">Add a credential</Link>
      </div>
    </div>
  );
}
