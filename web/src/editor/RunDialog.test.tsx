// @vitest-environment jsdom
import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import type { RunEstimate } from "../api/types";
import type { FlowNode } from "../graph/convert";
import { RunDialog } from "./RunDialog";

const node = (id: string, type: string, data: Record<string, unknown> = {}): FlowNode => ({
  id,
  type,
  position: { x: 0, y: 0 },
  data,
});

const estimate = (estimated: number, balance: number): RunEstimate =>
  ({
    estimated_credits: estimated,
    credits_balance: balance,
    nodes: [{ node_id: "speak", type: "TextToSpeech", credits: estimated }],
  }) as unknown as RunEstimate;

const GRAPH = [
  node("topic", "TextInput", { key: "topic", text: "Owls" }),
  node("tone", "TextInput", { key: "tone" }),
  node("again", "TextInput", { key: "topic", text: "ignored: the first node of a key fills it" }),
  node("speak", "TextToSpeech"),
];

function dialog(props: Partial<Parameters<typeof RunDialog>[0]> = {}) {
  const onStart = vi.fn();
  const onClose = vi.fn();
  const view = render(
    <RunDialog
      open
      nodes={GRAPH}
      estimate={estimate(3, 10)}
      error={null}
      onStart={onStart}
      onClose={onClose}
      {...props}
    />,
  );
  return { onStart, onClose, view, user: userEvent.setup() };
}

describe("RunDialog", () => {
  it("has one field per input key, filled with the first node's text", () => {
    dialog();
    const run = screen.getByRole("dialog", { name: "Run this workflow" });
    expect(within(run).getByLabelText("Input “topic”")).toHaveProperty("value", "Owls");
    expect(within(run).getByLabelText("Input “tone”")).toHaveProperty("value", "");
    expect(within(run).getAllByRole("textbox")).toHaveLength(2);
  });

  it("starts the run with what was typed, from the cache or without it", async () => {
    const { user, onStart } = dialog();
    await user.type(screen.getByLabelText("Input “tone”"), "dry");
    await user.click(screen.getByRole("button", { name: "Start run" }));
    expect(onStart).toHaveBeenLastCalledWith({ topic: "Owls", tone: "dry" }, true);
    await user.click(screen.getByRole("button", { name: "Start without cache" }));
    expect(onStart).toHaveBeenLastCalledWith({ topic: "Owls", tone: "dry" }, false);
  });

  it("starts a graph without input keys with no input", async () => {
    const { user, onStart } = dialog({ nodes: [node("speak", "TextToSpeech")] });
    expect(screen.getByText(/runs without input data/)).toBeTruthy();
    await user.click(screen.getByRole("button", { name: "Start run" }));
    expect(onStart).toHaveBeenCalledExactlyOnceWith(null, true);
  });

  it("cannot start before the estimate is in", () => {
    dialog({ estimate: null });
    expect(screen.getByText("Estimating…")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Start run" })).toHaveProperty("disabled", true);
    expect(screen.getByRole("button", { name: "Start without cache" })).toHaveProperty(
      "disabled",
      true,
    );
  });

  it("shows the estimate, and refuses a run the balance cannot pay", () => {
    dialog({ estimate: estimate(12, 10) });
    expect(screen.getByTestId("estimated-credits").textContent).toBe("12");
    expect(screen.getByText("Not enough credits for this run.")).toBeTruthy();
    expect(screen.getByRole("button", { name: "Start run" })).toHaveProperty("disabled", true);
  });

  it("shows why a start was refused", () => {
    dialog({ error: "Running is refused: 1 warning." });
    expect(screen.getByRole("alert").textContent).toBe("Running is refused: 1 warning.");
  });

  it("closes from Close, and is not shown once closed", async () => {
    const { user, onClose, view } = dialog();
    await user.click(screen.getByRole("button", { name: "Close" }));
    expect(onClose).toHaveBeenCalledOnce();
    view.rerender(
      <RunDialog
        open={false}
        nodes={GRAPH}
        estimate={null}
        error={null}
        onStart={vi.fn()}
        onClose={onClose}
      />,
    );
    expect(screen.queryByRole("dialog")).toBeNull();
  });
});
