// Vitest setup for the component tests (files marked `@vitest-environment jsdom`); the unit
// tests run in Node, where there is no document and nothing here applies.
import { afterEach } from "vitest";

if (typeof window !== "undefined") {
  const { cleanup } = await import("@testing-library/react");
  // Vitest runs without globals, so Testing Library cannot register its own cleanup.
  afterEach(cleanup);

  // jsdom has <dialog> without showModal/close: enough of them for the dialogs' own logic
  // (open attribute, the close event), not the browser's focus trap or backdrop.
  const proto = window.HTMLDialogElement?.prototype;
  if (proto && !proto.showModal) {
    proto.showModal = function (this: HTMLDialogElement) {
      this.setAttribute("open", "");
    };
    proto.show = proto.showModal;
    proto.close = function (this: HTMLDialogElement, value?: string) {
      if (!this.hasAttribute("open")) return;
      this.removeAttribute("open");
      if (value !== undefined) this.returnValue = value;
      this.dispatchEvent(new Event("close"));
    };
  }
}
