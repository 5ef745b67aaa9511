import { memo } from "react";
import { NodeResizer, type NodeProps } from "@xyflow/react";
import type { FlowNode } from "../graph/convert";
import { GROUP_TITLE_MAX } from "../graph/group";
import { useEditor } from "./context";

/** A group on the canvas (a node of type GROUP_TYPE): a titled frame the nodes in it move
 * with; no handles, never run. Drag it by its frame; resize it when selected. */
function GroupViewInner({ id, data, selected }: NodeProps<FlowNode>) {
  const { rename, ungroup } = useEditor();
  const title = typeof data.label === "string" ? data.label : "";
  return (
    <div className="nl-group" role="group" aria-label={`Group ${title}`} data-node-id={id}>
      <NodeResizer isVisible={selected === true} minWidth={160} minHeight={80} />
      <header>
        <input
          className="nodrag"
          aria-label="Group title"
          placeholder="Group"
          value={title}
          maxLength={GROUP_TITLE_MAX}
          onChange={(event) => {
            const value = event.target.value;
            rename(id, value.trim() ? value : "");
          }}
        />
        <button type="button" className="nodrag small" onClick={() => ungroup(id)}>
          Ungroup
        </button>
      </header>
    </div>
  );
}

export const GroupView = memo(GroupViewInner);
