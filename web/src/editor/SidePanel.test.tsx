// @vitest-environment jsdom
import { useState } from "react";
import { render, screen } from "@testing-library/react";
import userEvent from "@testing-library/user-event";
import { describe, expect, it, vi } from "vitest";
import type { NodeType } from "../api/types";
import { REMOVE } from "../forms/SchemaForm";
import type { FlowEdge, FlowNode } from "../graph/convert";
import { nodeType } from "../testing/nodeTypes";
import { EditorContext, type EditorState } from "./context";
import { SidePanel } from "./SidePanel";

const CATALOG = new Map<string, NodeType>(
  [
    nodeType("TextInput", {
      title: "Text input",
      params_schema: {
        type: "object",
        properties: { text: { type: "string", title: "Text" } },
      },
    }),
    nodeType("Shout", {
      title: "Shout",
      description: "Says it louder.",
      inputs: [{ name: "text", kind: "text", required: true, multiple: false }],
      params_schema: {
        type: "object",
        properties: {
          times: { type: "integer", title: "Times", minimum: 1, maximum: 5, default: 1 },
          loud: { type: "boolean", title: "Loud", default: false },
        },
      },
    }),
  ].map((t) => [t.type, t]),
);

const CONTEXT: EditorState = {
  catalog: CATALOG,
  live: {},
  problems: null,
  warnings: null,
  refused: new Set(),
  stale: new Set(),
  repeats: new Map(),
  rename: () => undefined,
  editNote: () => undefined,
  ungroup: () => undefined,
};

const node = (id: string, type: string, data = {}, selected = false): FlowNode => ({
  id,
  type,
  position: { x: 0, y: 0 },
  data,
  selected,
});

/** The panel over a graph held in state, as the editor holds it: edits come back as props. */
function Harness({
  initial,
  edges = [],
  onParam,
  onConnectInput = () => undefined,
  context = CONTEXT,
}: {
  initial: FlowNode[];
  edges?: FlowEdge[];
  onParam: (nodeId: string, name: string, value: unknown) => void;
  onConnectInput?: (nodeId: string, input: string, sourceId: string | null) => void;
  context?: EditorState;
}) {
  const [nodes, setNodes] = useState(initial);
  return (
    <EditorContext.Provider value={context}>
      <SidePanel
        title="My workflow"
        nodes={nodes}
        edges={edges}
        runError={null}
        onParam={(id, name, value) => {
          onParam(id, name, value);
          setNodes((ns) =>
            ns.map((n) => {
              if (n.id !== id) return n;
              const data = { ...n.data };
              if (value === REMOVE) delete data[name];
              else data[name] = value;
              return { ...n, data };
            }),
          );
        }}
        onConnectInput={onConnectInput}
        onDelete={() => undefined}
        onClose={() => undefined}
      />
    </EditorContext.Provider>
  );
}

describe("SidePanel (details)", () => {
  it("shows the workflow when nothing is selected", () => {
    render(<Harness initial={[node("a", "TextInput")]} onParam={vi.fn()} />);
    const panel = screen.getByRole("complementary", { name: "Details" });
    expect(panel.textContent).toContain("My workflow");
    expect(panel.textContent).toContain("1 nodes, 0 connections.");
  });

  it("edits the selected node's params through its form", async () => {
    const onParam = vi.fn();
    const user = userEvent.setup();
    render(<Harness initial={[node("s", "Shout", {}, true)]} onParam={onParam} />);
    expect(screen.getByRole("heading", { name: "Shout" })).toBeTruthy();
    const times = screen.getByRole("spinbutton", { name: "Times" });
    await user.clear(times);
    await user.type(times, "3");
    expect(onParam).toHaveBeenLastCalledWith("s", "times", 3);
    await user.click(screen.getByRole("checkbox", { name: "Loud" }));
    expect(onParam).toHaveBeenLastCalledWith("s", "loud", true);
  });

  it("says when a number is out of bounds, and still passes it on", async () => {
    const onParam = vi.fn();
    const user = userEvent.setup();
    render(<Harness initial={[node("s", "Shout", {}, true)]} onParam={onParam} />);
    const times = screen.getByRole("spinbutton", { name: "Times" });
    await user.clear(times);
    await user.type(times, "9");
    expect(onParam).toHaveBeenLastCalledWith("s", "times", 9);
    expect(times.getAttribute("aria-invalid")).toBe("true");
  });

  it("names the node; an empty name removes it", async () => {
    const onParam = vi.fn();
    const user = userEvent.setup();
    render(<Harness initial={[node("s", "Shout", {}, true)]} onParam={onParam} />);
    const name = screen.getByRole("textbox", { name: "Name" });
    await user.type(name, "Hi");
    expect(onParam).toHaveBeenLastCalledWith("s", "label", "Hi");
    expect(screen.getByRole("heading", { name: "Hi" })).toBeTruthy();
    await user.clear(name);
    expect(onParam).toHaveBeenLastCalledWith("s", "label", REMOVE);
  });

  it("connects an input from the picker of the nodes that fit it", async () => {
    const onConnectInput = vi.fn();
    const user = userEvent.setup();
    render(
      <Harness
        initial={[node("t", "TextInput"), node("s", "Shout", {}, true)]}
        onParam={vi.fn()}
        onConnectInput={onConnectInput}
      />,
    );
    const picker = screen.getByRole("combobox", { name: "text (text)" });
    await user.selectOptions(picker, "t");
    expect(onConnectInput).toHaveBeenCalledExactlyOnceWith("s", "text", "t");
  });

  it("shows the problems a refused save placed on the node", () => {
    const problems = {
      nodes: new Map([["s", ["times: too many"]]]),
      edges: new Map(),
      general: [],
    };
    render(
      <Harness
        initial={[node("s", "Shout", {}, true)]}
        onParam={vi.fn()}
        context={{ ...CONTEXT, problems }}
      />,
    );
    expect(screen.getByRole("alert").textContent).toBe("times: too many");
  });
});
