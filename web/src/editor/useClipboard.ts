import { useCallback, useRef } from "react";
import { useQueryClient } from "@tanstack/react-query";
import type { NodeType } from "../api/types";
import { copySelection, paste, type Copied } from "../graph/clipboard";
import { importedParams, parseComfyWorkflow, proposeBindings } from "../graph/comfyui";
import { INPUT_NODE, keyForFile } from "../assets/media";
import { isCancelled, startUpload } from "../assets/uploads";
import { messageOf } from "../components/forms";
import type { Graph } from "./useGraph";
import type { GraphEdits } from "./useGraphEdits";

/** What comes onto the canvas from elsewhere: nodes copied and pasted, a ComfyUI workflow
 * pasted as text, media files dropped or pasted. */
export function useClipboard(
  graph: Graph,
  addNode: GraphEdits["addNode"],
  catalog: Map<string, NodeType>,
  notify: (message: string) => void,
) {
  const client = useQueryClient();
  const { nodesRef, edgesRef, setNodes, setEdges, setDirty, history } = graph;
  const clipboard = useRef<Copied | null>(null);

  const copy = useCallback(() => {
    const copied = copySelection(nodesRef.current, edgesRef.current);
    if (!copied) return;
    clipboard.current = copied;
    const count = copied.nodes.length;
    notify(`Copied ${count} node${count === 1 ? "" : "s"}.`);
  }, [edgesRef, nodesRef, notify]);

  const pasteCopy = useCallback(() => {
    if (!clipboard.current) return;
    history.record();
    const result = paste(clipboard.current, nodesRef.current, edgesRef.current);
    setNodes(result.nodes);
    setEdges(result.edges);
    clipboard.current = result.pasted;
    setDirty(true);
  }, [edgesRef, history, nodesRef, setDirty, setEdges, setNodes]);

  /** Pasted text that is a ComfyUI workflow becomes a ComfyUIWorkflow node with its bindings
   * proposed (graph/comfyui.ts); false when the text is not one. */
  const importComfy = useCallback(
    (text: string): boolean => {
      const parsed = parseComfyWorkflow(text);
      if (!parsed) return false;
      if ("error" in parsed) {
        notify(parsed.error);
        return true;
      }
      const proposal = proposeBindings(parsed.workflow);
      if (!catalog.has(proposal.nodeType)) {
        notify(`This server has no ${proposal.nodeType} node.`);
        return true;
      }
      addNode(proposal.nodeType, undefined, importedParams(proposal));
      const count = proposal.bindings.length;
      notify(
        `Imported a ComfyUI workflow with ${count} binding${count === 1 ? "" : "s"} proposed: ` +
          "connect its inputs and pick your ComfyUI credential.",
      );
      return true;
    },
    [addNode, catalog, notify],
  );

  /** Files dropped on the canvas (or a pasted image): each is uploaded (the top bar shows
   * the progress) and, once the server has read what it is, becomes an Image, Audio or
   * Video input node bound to its asset, with a key made from the file's name, so the run
   * dialog offers it and other files can be given for it. */
  const addMediaNodes = useCallback(
    async (files: File[], position?: { x: number; y: number }) => {
      let offset = 0;
      await Promise.all(
        files.map(async (file) => {
          try {
            const { asset } = await startUpload(file);
            const type = INPUT_NODE[asset.kind];
            const at = position
              ? { x: position.x + offset * 40, y: position.y + offset * 160 }
              : undefined;
            offset++;
            addNode(type, at, { key: keyForFile(file.name, nodesRef.current), asset: asset.id });
            void client.invalidateQueries({ queryKey: ["assets"] });
          } catch (exc) {
            if (!isCancelled(exc)) notify(`${file.name} not uploaded: ${messageOf(exc)}`);
          }
        }),
      );
    },
    [addNode, client, nodesRef, notify],
  );

  return { copy, pasteCopy, importComfy, addMediaNodes };
}
