import { useModal } from "../components/useModal";

/** Every keyboard and mouse shortcut of the editor, as the sheet lists them. */
export const SHORTCUTS: readonly { keys: string; what: string }[] = [
  { keys: "?", what: "Show this sheet" },
  { keys: "Ctrl+S", what: "Save" },
  { keys: "Ctrl+Z", what: "Undo" },
  { keys: "Ctrl+Shift+Z or Ctrl+Y", what: "Redo" },
  { keys: "Ctrl+C", what: "Copy the selected nodes" },
  { keys: "Ctrl+V", what: "Paste nodes, or a ComfyUI workflow saved with Export (API)" },
  { keys: "Ctrl+G", what: "Frame the selected nodes in a group" },
  { keys: "Ctrl+Shift+G", what: "Ungroup the selected groups (their nodes stay)" },
  { keys: "Delete or Backspace", what: "Delete the selection (a deleted group keeps its nodes)" },
  { keys: "Shift+drag", what: "Select several nodes" },
  { keys: "Double-click a node's title", what: "Rename the node (Enter keeps, Escape cancels)" },
  { keys: "Enter in the palette's search", what: "Add the first match" },
  { keys: "Escape", what: "Close a drawer, dialog or this sheet" },
];

/** The editor's shortcut sheet: `?` opens it, Escape or Close closes it. On a Mac, Cmd
 * works wherever Ctrl is written. */
export function ShortcutSheet({ open, onClose }: { open: boolean; onClose: () => void }) {
  const ref = useModal(open);
  return (
    <dialog ref={ref} onCancel={onClose} aria-labelledby="shortcuts-title">
      <h2 id="shortcuts-title">Keyboard shortcuts</h2>
      <table className="shortcuts">
        <tbody>
          {SHORTCUTS.map((s) => (
            <tr key={s.keys}>
              <th scope="row">
                <kbd>{s.keys}</kbd>
              </th>
              <td>{s.what}</td>
            </tr>
          ))}
        </tbody>
      </table>
      <p className="small muted">On a Mac, Cmd works wherever Ctrl is written.</p>
      <div className="row" style={{ justifyContent: "flex-end" }}>
        <button type="button" onClick={onClose}>
          Close
        </button>
      </div>
    </dialog>
  );
}
