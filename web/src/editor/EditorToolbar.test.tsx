// @vitest-environment jsdom
import { render, screen, within } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { MemoryRouter } from "react-router";
import { describe, expect, it, vi } from "vitest";
import { EditorToolbar } from "./EditorToolbar";
import type { RunView } from "./useRun";

type Props = Parameters<typeof EditorToolbar>[0];

function toolbar(overrides: Partial<Props> = {}) {
  const props: Props = {
    drawer: null,
    onDrawer: vi.fn(),
    workflowId: "wf1",
    name: "Podcast",
    onName: vi.fn(),
    dirty: false,
    saving: false,
    onSave: vi.fn(),
    history: { undo: vi.fn(), redo: vi.fn(), canUndo: false, canRedo: false },
    onFitView: vi.fn(),
    onGroup: vi.fn(),
    canGroup: false,
    run: null,
    onCancel: vi.fn(),
    onRun: vi.fn(),
    onRunAgain: vi.fn(),
    onRetryCurrent: vi.fn(),
    cachedCount: 0,
    version: 3,
    historyOpen: false,
    onHistory: vi.fn(),
    onPublish: vi.fn(),
    ...overrides,
  };
  render(
    <MemoryRouter>
      <EditorToolbar {...props} />
    </MemoryRouter>,
  );
  return { props, user: userEvent.setup() };
}

const button = (name: string) => screen.getByRole("button", { name }) as HTMLButtonElement;
const run = (status: RunView["status"], extra: Partial<RunView> = {}): RunView => ({
  runId: "r1",
  status,
  ...extra,
});

describe("EditorToolbar", () => {
  it("a fresh workflow: saved, nothing to undo, nothing to group, never run", () => {
    toolbar();
    expect(screen.getByRole("toolbar", { name: "Editor" })).toBeTruthy();
    expect(screen.getByRole("textbox", { name: "Workflow name" })).toHaveProperty(
      "value",
      "Podcast",
    );
    expect(screen.getByTestId("save-state").textContent).toBe("All changes saved · version 3");
    expect(button("Save").disabled).toBe(false);
    expect(button("Save").className).toBe("");
    for (const name of ["Undo", "Redo", "Group", "Run again", "Run without cache"]) {
      expect(button(name).disabled).toBe(true);
    }
    expect(button("Retry with this version").disabled).toBe(true);
    expect(button("Run").disabled).toBe(false);
    expect(screen.getByTestId("run-state").textContent).toBe("Not run yet");
  });

  it("unsaved changes make Save the primary button; saving disables it and the runs", () => {
    toolbar({ dirty: true, saving: true, run: run("completed") });
    expect(screen.getByTestId("save-state").textContent).toContain("Unsaved changes");
    expect(button("Save").className).toBe("primary");
    for (const name of ["Save", "Run", "Run again", "Run without cache"]) {
      expect(button(name).disabled).toBe(true);
    }
  });

  it("undo, redo and group follow what can be done, and call back when pressed", async () => {
    const history = { undo: vi.fn(), redo: vi.fn(), canUndo: true, canRedo: true };
    const { props, user } = toolbar({ history, canGroup: true });
    await user.click(button("Undo"));
    await user.click(button("Redo"));
    await user.click(button("Group"));
    await user.click(button("Fit view"));
    await user.click(button("Save"));
    expect(history.undo).toHaveBeenCalledOnce();
    expect(history.redo).toHaveBeenCalledOnce();
    expect(props.onGroup).toHaveBeenCalledOnce();
    expect(props.onFitView).toHaveBeenCalledOnce();
    expect(props.onSave).toHaveBeenCalledOnce();
  });

  it("typing a name passes it on", async () => {
    const { props, user } = toolbar();
    await user.type(screen.getByRole("textbox", { name: "Workflow name" }), "!");
    expect(props.onName).toHaveBeenLastCalledWith("Podcast!");
  });

  it("a running run: Cancel run replaces Run, the others wait", async () => {
    const { props, user } = toolbar({ run: run("running") });
    expect(screen.queryByRole("button", { name: "Run" })).toBeNull();
    await user.click(button("Cancel run"));
    expect(props.onCancel).toHaveBeenCalledOnce();
    expect(button("Run again").disabled).toBe(true);
    expect(button("Retry with this version").disabled).toBe(true);
  });

  it("a finished run: run again with or without the cache, its credits and cached nodes", async () => {
    const { props, user } = toolbar({
      run: run("completed", { creditsUsed: 4 }),
      cachedCount: 2,
    });
    const group = screen.getByRole("group", { name: "Run" });
    await user.click(within(group).getByRole("button", { name: "Run again" }));
    await user.click(within(group).getByRole("button", { name: "Run without cache" }));
    expect(props.onRunAgain).toHaveBeenNthCalledWith(1, true);
    expect(props.onRunAgain).toHaveBeenNthCalledWith(2, false);
    expect(button("Retry with this version").disabled).toBe(true);
    const state = screen.getByTestId("run-state");
    expect(state.textContent).toContain("4 credits");
    expect(state.textContent).toContain("2 nodes cached");
    expect(within(state).getByRole("link", { name: "Run page" }).getAttribute("href")).toBe(
      "/workflows/wf1/runs/r1",
    );
  });

  it.each(["failed", "cancelled"] as const)(
    "a %s run can be retried with this version",
    async (s) => {
      const { props, user } = toolbar({ run: run(s) });
      await user.click(button("Retry with this version"));
      expect(props.onRetryCurrent).toHaveBeenCalledOnce();
    },
  );

  it("the drawers, history and publish buttons say their state and call back", async () => {
    const { props, user } = toolbar({ drawer: "palette", historyOpen: true });
    expect(button("Nodes").getAttribute("aria-expanded")).toBe("true");
    expect(button("Details").getAttribute("aria-expanded")).toBe("false");
    expect(button("History").getAttribute("aria-pressed")).toBe("true");
    await user.click(button("Nodes"));
    expect(props.onDrawer).toHaveBeenLastCalledWith(null);
    await user.click(button("Details"));
    expect(props.onDrawer).toHaveBeenLastCalledWith("details");
    await user.click(button("History"));
    await user.click(button("Publish as app"));
    expect(props.onHistory).toHaveBeenCalledOnce();
    expect(props.onPublish).toHaveBeenCalledOnce();
  });
});
