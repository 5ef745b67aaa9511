import { useModal } from "../components/useModal";

/** Asked when the user leaves the editor with unsaved changes (an in-app link, back or
 * forward): save and leave, leave without saving, or stay. */
export function LeaveDialog({
  open,
  saving,
  onSaveAndLeave,
  onLeave,
  onStay,
}: {
  open: boolean;
  saving: boolean;
  onSaveAndLeave: () => void;
  onLeave: () => void;
  onStay: () => void;
}) {
  const ref = useModal(open);
  return (
    <dialog ref={ref} onCancel={onStay} aria-labelledby="leave-title">
      <h2 id="leave-title">Leave without saving?</h2>
      <p>This workflow has changes that are not saved. They are lost if you leave now.</p>
      <div className="row" style={{ justifyContent: "flex-end", marginTop: 16 }}>
        <button type="button" onClick={onStay}>
          Stay
        </button>
        <button type="button" className="danger" onClick={onLeave}>
          Leave without saving
        </button>
        <button type="button" className="primary" onClick={onSaveAndLeave} disabled={saving}>
          Save and leave
        </button>
      </div>
    </dialog>
  );
}
