import type { FlowEdge, FlowNode } from "../graph/convert";
import { ParamsPanel } from "./ParamsPanel";
import { useEditor } from "./context";
import { ArtifactPreview } from "./ArtifactPreview";

/** The right-hand panel: what is selected (one node, several, a connection), else the
 * workflow and how to use the editor. */
export function SidePanel({
  title,
  nodes,
  edges,
  runError,
  onParam,
  onConnectInput,
  onDelete,
  onClose,
}: {
  title: string;
  nodes: FlowNode[];
  edges: FlowEdge[];
  runError: string | null;
  onParam: (nodeId: string, name: string, value: unknown) => void;
  onConnectInput: (nodeId: string, input: string, sourceId: string | null) => void;
  onDelete: (selection: { nodes?: FlowNode[]; edges?: FlowEdge[] }) => void;
  /** Closes the panel where it is a drawer (narrow screens). */
  onClose: () => void;
}) {
  const { problems, live, stale } = useEditor();
  const selectedNodes = nodes.filter((n) => n.selected);
  const selectedEdges = edges.filter((e) => e.selected);
  const [node] = selectedNodes;
  const [edge] = selectedEdges;
  let content: React.ReactNode;
  if (selectedNodes.length === 1 && node) {
    const state = live[node.id];
    const artifact = state?.status === "completed" && !state.items ? state.artifactId : undefined;
    content = (
      <>
        <ParamsPanel
          node={node}
          nodes={nodes}
          edges={edges}
          onParam={onParam}
          onConnectInput={onConnectInput}
          onDelete={() => onDelete({ nodes: [node] })}
        />
        {artifact && (
          <section className="node-output" aria-label="Output">
            <h3>Output{stale.has(node.id) ? " (stale)" : ""}</h3>
            {stale.has(node.id) && (
              <p className="small stale-note">
                Made before a change to this node or one before it: run again to update it.
              </p>
            )}
            <ArtifactPreview key={artifact} artifactId={artifact} />
          </section>
        )}
      </>
    );
  } else if (selectedNodes.length > 1) {
    content = (
      <>
        <h2>{selectedNodes.length} nodes selected</h2>
        <p className="small muted">Ctrl+C copies them, Ctrl+V pastes, Delete removes them.</p>
        <button type="button" className="danger" onClick={() => onDelete({ nodes: selectedNodes })}>
          Delete nodes
        </button>
      </>
    );
  } else if (selectedEdges.length === 1 && edge) {
    content = (
      <>
        <h2>Connection</h2>
        <p className="small">
          {edge.source} → {edge.target}
          {edge.targetHandle ? ` (${edge.targetHandle})` : ""}
        </p>
        {(problems?.edges.get(edge.id) ?? []).map((m, i) => (
          <div className="banner error" key={i}>
            {m}
          </div>
        ))}
        <button type="button" className="danger" onClick={() => onDelete({ edges: [edge] })}>
          Delete connection
        </button>
      </>
    );
  } else {
    content = (
      <>
        <h2>{title}</h2>
        <p className="small muted">
          {nodes.length} nodes, {edges.length} connections.
        </p>
        <ul className="small muted">
          <li>Drag a node from the palette, or press it to add it.</li>
          <li>
            Connect an output (right) to an input (left) of the same kind: text, image, audio or
            video.
          </li>
          <li>Select a node to edit its parameters or pick its inputs.</li>
          <li>
            Ctrl+S saves, Ctrl+Z undoes, Ctrl+C / Ctrl+V copy and paste, Shift+drag selects several.
            Pasting a ComfyUI workflow saved with Export (API) adds it as a ComfyUI node.
          </li>
          <li>
            Press <kbd>?</kbd> for every keyboard shortcut.
          </li>
        </ul>
        {runError && <div className="banner error">{runError}</div>}
      </>
    );
  }
  return (
    <aside className="sidepanel" id="editor-details" aria-label="Details">
      <button type="button" className="drawer-close" onClick={onClose}>
        Close
      </button>
      {content}
    </aside>
  );
}
