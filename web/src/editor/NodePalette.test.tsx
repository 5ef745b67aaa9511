// @vitest-environment jsdom
import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import { nodeType } from "../testing/nodeTypes";
import { NOTE_TYPE } from "../graph/note";
import { NodePalette } from "./NodePalette";

const TYPES = [
  nodeType("TextInput", { category: "text", title: "Text input" }),
  nodeType("TextToSpeech", { category: "audio", title: "Text to speech" }),
  nodeType("ImageResize", { category: "image", title: "Resize image" }),
  nodeType("Blocked", {
    category: "image",
    title: "Blocked thing",
    available: false,
    unavailable_reason: "needs ffmpeg",
  }),
];

function palette() {
  const onAdd = vi.fn();
  const onClose = vi.fn();
  render(<NodePalette types={TYPES} onAdd={onAdd} onClose={onClose} />);
  return { onAdd, onClose, user: userEvent.setup() };
}

describe("NodePalette", () => {
  it("lists every type as an Add button in the Node palette", () => {
    palette();
    const aside = screen.getByRole("complementary", { name: "Node palette" });
    expect(aside).toBeTruthy();
    for (const title of ["Text input", "Text to speech", "Resize image", "Blocked thing"]) {
      expect(screen.getByRole("button", { name: `Add ${title}` })).toBeTruthy();
    }
  });

  it("narrows the list to what the search matches, aliases included", async () => {
    const { user } = palette();
    await user.type(screen.getByRole("searchbox", { name: "Add a node" }), "tts");
    expect(screen.getByRole("button", { name: "Add Text to speech" })).toBeTruthy();
    expect(screen.queryByRole("button", { name: "Add Resize image" })).toBeNull();
    expect(screen.getByText(/Enter adds the first match: Text to speech/)).toBeTruthy();
  });

  it("says so when nothing matches", async () => {
    const { user } = palette();
    await user.type(screen.getByRole("searchbox", { name: "Add a node" }), "zzzz");
    expect(screen.getByText("No node matches.")).toBeTruthy();
  });

  it("adds the first match on Enter in the search", async () => {
    const { user, onAdd } = palette();
    await user.type(screen.getByRole("searchbox", { name: "Add a node" }), "resize{Enter}");
    expect(onAdd).toHaveBeenCalledExactlyOnceWith("ImageResize");
  });

  it("adds a type when its button is pressed, and a sticky note from its own button", async () => {
    const { user, onAdd } = palette();
    await user.click(screen.getByRole("button", { name: "Add Text input" }));
    await user.click(screen.getByRole("button", { name: "Add a sticky note" }));
    expect(onAdd.mock.calls).toEqual([["TextInput"], [NOTE_TYPE]]);
  });

  it("keeps an unavailable type focusable but never adds it, and says why", async () => {
    const { user, onAdd } = palette();
    const blocked = screen.getByRole("button", { name: "Add Blocked thing" });
    expect(blocked.getAttribute("aria-disabled")).toBe("true");
    expect(blocked.getAttribute("draggable")).toBe("false");
    expect(screen.getByText("needs ffmpeg")).toBeTruthy();
    await user.click(blocked);
    expect(onAdd).not.toHaveBeenCalled();
  });

  it("closes from its Close button (the drawer on narrow screens)", async () => {
    const { user, onClose } = palette();
    await user.click(screen.getByRole("button", { name: "Close" }));
    expect(onClose).toHaveBeenCalledOnce();
  });
});
