import { useEffect, useRef } from "react";

function isTyping(target: EventTarget | null): boolean {
  const el = target as HTMLElement | null;
  return Boolean(
    el && (el.isContentEditable || ["INPUT", "TEXTAREA", "SELECT"].includes(el.tagName)),
  );
}

/** The editor's keyboard: Ctrl+S saves (even while typing); Ctrl+Z / Ctrl+Shift+Z (Ctrl+Y),
 * Ctrl+C, Ctrl+V, Ctrl+G, Ctrl+Shift+G and "?" act on the canvas unless a field has the focus
 * or a dialog (``paused``) is open. */
export function useShortcuts({
  paused,
  save,
  undo,
  redo,
  copy,
  group,
  ungroup,
  showShortcuts,
  pasteCopy,
  pasteFiles,
  pasteText,
}: {
  paused: boolean;
  save: () => void;
  undo: () => void;
  redo: () => void;
  copy: () => void;
  group: () => void;
  ungroup: () => void;
  showShortcuts: () => void;
  /** Pastes the nodes copied on the canvas. */
  pasteCopy: () => void;
  pasteFiles: (files: File[]) => void;
  /** Pastes the clipboard's text when it is something the editor takes; false when not. */
  pasteText: (text: string) => boolean;
}) {
  // Ctrl+V pastes what the browser's clipboard holds when it is a ComfyUI workflow, else the
  // nodes copied on the canvas: the paste event (which carries the clipboard's text) decides,
  // and a browser that sends none gets the copied nodes after the key press.
  const pendingPaste = useRef(false);
  useEffect(() => {
    const onPaste = (event: ClipboardEvent) => {
      if (isTyping(event.target) || paused) return;
      pendingPaste.current = false;
      const files = [...(event.clipboardData?.files ?? [])];
      if (files.length) {
        event.preventDefault();
        pasteFiles(files);
        return;
      }
      if (pasteText(event.clipboardData?.getData("text/plain") ?? "")) {
        event.preventDefault();
        return;
      }
      pasteCopy();
    };
    window.addEventListener("paste", onPaste);
    return () => window.removeEventListener("paste", onPaste);
  }, [pasteCopy, pasteFiles, pasteText, paused]);

  useEffect(() => {
    const onKey = (event: KeyboardEvent) => {
      const mod = event.ctrlKey || event.metaKey;
      if (!mod && !event.altKey && event.key === "?" && !isTyping(event.target) && !paused) {
        event.preventDefault();
        showShortcuts();
        return;
      }
      if (!mod) return;
      const key = event.key.toLowerCase();
      if (key === "s") {
        event.preventDefault();
        save();
        return;
      }
      if (isTyping(event.target) || paused) return;
      if (key === "z" && !event.shiftKey) undo();
      else if ((key === "z" && event.shiftKey) || key === "y") redo();
      else if (key === "c") copy();
      else if (key === "g" && !event.shiftKey) group();
      else if (key === "g" && event.shiftKey) ungroup();
      else if (key === "v") {
        pendingPaste.current = true;
        setTimeout(() => {
          if (!pendingPaste.current) return;
          pendingPaste.current = false;
          pasteCopy();
        }, 0);
        return; // the browser's paste event follows, with the clipboard's text
      } else return;
      event.preventDefault();
    };
    window.addEventListener("keydown", onKey);
    return () => window.removeEventListener("keydown", onKey);
  }, [copy, group, paused, pasteCopy, redo, save, showShortcuts, undo, ungroup]);
}
