import { memo } from "react";
import type { NodeProps } from "@xyflow/react";
import type { FlowNode } from "../graph/convert";
import { useEditor } from "./context";

/** A sticky note on the canvas (a node of type NOTE_TYPE): text only, no handles; the
 * server keeps it in the graph and never runs it. Drag it by its header. */
function NoteViewInner({ id, data }: NodeProps<FlowNode>) {
  const { editNote } = useEditor();
  const text = typeof data.text === "string" ? data.text : "";
  return (
    <div className="nl-note" role="group" aria-label="Note" data-node-id={id}>
      <header>Note</header>
      <textarea
        className="nodrag nowheel"
        aria-label="Note text"
        placeholder="Write a note…"
        value={text}
        maxLength={10_000}
        onChange={(event) => editNote(id, event.target.value)}
      />
    </div>
  );
}

export const NoteView = memo(NoteViewInner);
