import { describe, expect, it } from "vitest";
import {
  createBody,
  draftFromApp,
  embedSnippet,
  inputCandidates,
  newDraft,
  outputCandidates,
  updateBody,
  type AppRecord,
} from "./publish";

const nodes = [
  { id: "in", type: "TextInput", data: { key: "name" } },
  { id: "plain", type: "TextInput", data: {} },
  { id: "again", type: "TextInput", data: { key: "name" } },
  { id: "photo", type: "ImageInput", data: { key: "photo" } },
  { id: "nokey", type: "AudioInput", data: {} },
  { id: "tpl", type: "TextTemplate", data: { label: "Greeting" } },
  { id: "small", type: "ImageResize", data: {} },
  { id: "note", type: "Note", data: {} },
  { id: "frame", type: "Group", data: {} },
];
const edges = [
  { source: "in", target: "tpl" },
  { source: "photo", target: "small" },
  { source: "tpl", target: "small" },
];

function published(overrides: Partial<AppRecord> = {}): AppRecord {
  return {
    id: "app1",
    slug: "s",
    url: "http://host/apps/s",
    workflow_id: "wf",
    workflow_version: 2,
    title: "Greeter",
    description: "Says hello",
    cover_asset_id: "asset1",
    inputs: [
      {
        key: "photo",
        kind: "image",
        label: "A photo",
        help: "Any photo",
        default: null,
        max_length: 2000,
        required: false,
      },
    ],
    outputs: [{ node_id: "small", label: "Thumbnail" }],
    access: "public",
    has_password: true,
    published: true,
    budget_daily: 100,
    budget_total: null,
    max_concurrent: 3,
    rate_per_visitor: 5,
    rate_per_ip: 10,
    challenge_bits: 12,
    frame_ancestors: ["https://a.example", "http://b.example:8080"],
    spent_today: 0,
    spent_total: 7,
    created_at: "2026-11-28T00:00:00.000Z",
    updated_at: "2026-11-28T00:00:00.000Z",
    ...overrides,
  };
}

describe("what a graph can show", () => {
  it("lists each input key once, as the server reads them", () => {
    expect(inputCandidates(nodes)).toEqual([
      { key: "name", kind: "text" },
      { key: "text", kind: "text" },
      { key: "photo", kind: "image" },
    ]);
  });

  it("offers every node but inputs and canvas furniture, the graph's ends first", () => {
    expect(outputCandidates(nodes, edges)).toEqual([
      { nodeId: "small", title: "small (ImageResize)", end: true },
      { nodeId: "tpl", title: "Greeting (TextTemplate)", end: false },
    ]);
  });
});

describe("a new app", () => {
  it("shows every input and the graph's ends, with the server's defaults", () => {
    const draft = newDraft("My workflow", nodes, edges);
    const { body, problems } = createBody(draft, "wf", 3);
    expect(problems).toEqual([]);
    expect(body).toEqual({
      workflow_id: "wf",
      workflow_version: 3,
      published: true,
      title: "My workflow",
      description: "",
      cover_asset_id: null,
      inputs: [
        { key: "name", label: "name", help: "", default: null, max_length: 2000, required: true },
        { key: "text", label: "text", help: "", default: null, max_length: 2000, required: true },
        { key: "photo", label: "photo", help: "", default: null, max_length: 2000, required: true },
      ],
      outputs: [{ node_id: "small", label: "small" }],
      access: "link",
      budget_daily: null,
      budget_total: null,
      max_concurrent: null,
      rate_per_visitor: 20,
      rate_per_ip: 60,
      frame_ancestors: [],
      challenge_bits: null,
    });
  });

  it("sends what the owner chose", () => {
    const draft = newDraft("x", nodes, edges);
    draft.title = "  Poster maker ";
    draft.coverAssetId = "cover";
    draft.fields = draft.fields.map((f) =>
      f.key === "name"
        ? { ...f, label: "Your name", help: "Short", default: "Ada", maxLength: "40" }
        : { ...f, shown: false },
    );
    draft.outputs = draft.outputs.map((o) => ({
      ...o,
      shown: true,
      label: o.nodeId.toUpperCase(),
    }));
    draft.access = "public";
    draft.password = "set";
    draft.passwordValue = "open sesame";
    draft.budgetDaily = "500";
    draft.budgetTotal = " 5000 ";
    draft.maxConcurrent = "4";
    draft.frameAncestors = "https://shop.example.com/\n\nhttp://localhost:5173";
    draft.challengeBits = "16";
    const { body, problems } = createBody(draft, "wf", 1);
    expect(problems).toEqual([]);
    expect(body).toMatchObject({
      title: "Poster maker",
      cover_asset_id: "cover",
      inputs: [{ key: "name", label: "Your name", help: "Short", default: "Ada", max_length: 40 }],
      outputs: [
        { node_id: "small", label: "SMALL" },
        { node_id: "tpl", label: "TPL" },
      ],
      access: "public",
      password: "open sesame",
      budget_daily: 500,
      budget_total: 5000,
      max_concurrent: 4,
      frame_ancestors: ["https://shop.example.com", "http://localhost:5173"],
      challenge_bits: 16,
    });
  });

  it("points at what the server would refuse", () => {
    const draft = newDraft("", nodes, edges);
    draft.outputs = draft.outputs.map((o) => ({ ...o, shown: false }));
    draft.budgetDaily = "1.5";
    draft.maxConcurrent = "0";
    draft.ratePerIp = "";
    draft.password = "set";
    draft.passwordValue = "abc";
    draft.frameAncestors = "shop.example.com\nhttps://ok.example";
    draft.challengeBits = "40";
    draft.fields = draft.fields.map((f) =>
      f.key === "name" ? { ...f, default: "too long", maxLength: "3" } : f,
    );
    const fields = createBody(draft, "wf", 1).problems.map((p) => p.field);
    expect(fields.sort()).toEqual(
      [
        "title",
        "default:name",
        "outputs",
        "frame_ancestors",
        "budget_daily",
        "max_concurrent",
        "rate_per_ip",
        "challenge_bits",
        "password",
      ].sort(),
    );
  });
});

describe("a published app", () => {
  it("reads back into the form: its fields first, the graph's others hidden", () => {
    const draft = draftFromApp(published(), nodes, edges);
    expect(draft.fields.map((f) => [f.key, f.shown, f.label])).toEqual([
      ["photo", true, "A photo"],
      ["name", false, "name"],
      ["text", false, "text"],
    ]);
    expect(draft.outputs.map((o) => [o.nodeId, o.shown, o.label])).toEqual([
      ["small", true, "Thumbnail"],
      ["tpl", false, ""],
    ]);
    expect(draft.password).toBe("keep");
    expect(draft.frameAncestors).toBe("https://a.example\nhttp://b.example:8080");
  });

  it("updates with the same values it was read with, the password kept unsent", () => {
    const app = published();
    const { body, problems } = updateBody(draftFromApp(app, nodes, edges));
    expect(problems).toEqual([]);
    expect(body).not.toHaveProperty("password");
    expect(body).not.toHaveProperty("workflow_version");
    expect(body).toMatchObject({
      title: app.title,
      description: app.description,
      cover_asset_id: app.cover_asset_id,
      inputs: [
        { key: "photo", label: "A photo", help: "Any photo", default: null, required: false },
      ],
      outputs: app.outputs,
      access: "public",
      budget_daily: 100,
      budget_total: null,
      max_concurrent: 3,
      rate_per_visitor: 5,
      rate_per_ip: 10,
      frame_ancestors: app.frame_ancestors,
      challenge_bits: 12,
    });
  });

  it("removes the password, or moves to another version", () => {
    const draft = { ...draftFromApp(published(), nodes, edges), password: "none" as const };
    expect(updateBody(draft).body.password).toBeNull();
    expect(updateBody(draft, 5).body.workflow_version).toBe(5);
  });

  it("embeds with its title escaped", () => {
    expect(embedSnippet({ url: "https://h/apps/s", title: 'A "quoted" <b>&' })).toBe(
      '<iframe src="https://h/apps/s" width="480" height="900" style="border:0" ' +
        'title="A &quot;quoted&quot; &lt;b>&amp;"></iframe>',
    );
  });
});
