import { useCallback, useEffect, useRef, useState } from "react";
import { solve } from "./pow";
import {
  apiPath,
  problemText,
  recentRuns,
  remember,
  runBody,
  usable,
  visitorSession,
  type Challenge,
  type FormField,
  type PublicApp,
  type Recent,
  type VisitorRun,
} from "./visitor";

type Load = { state: "loading" } | { state: "missing" } | { state: "ready"; app: PublicApp };

export function AppPage({ slug }: { slug: string | null }) {
  const [load, setLoad] = useState<Load>({ state: "loading" });
  const [recent, setRecent] = useState<Recent[]>(() =>
    slug ? recentRuns(localStorage, slug) : [],
  );
  const [current, setCurrent] = useState<Recent | null>(recent[0] ?? null);

  useEffect(() => {
    if (!slug) return setLoad({ state: "missing" });
    let stop = false;
    void fetch(apiPath(slug)).then(async (r) => {
      if (stop) return;
      if (!r.ok) return setLoad({ state: "missing" });
      const app = (await r.json()) as PublicApp;
      document.title = app.title;
      setLoad({ state: "ready", app });
    });
    return () => {
      stop = true;
    };
  }, [slug]);

  const started = useCallback(
    (run: Recent) => {
      if (!slug) return;
      setRecent(remember(localStorage, slug, run));
      setCurrent(run);
    },
    [slug],
  );

  if (load.state === "loading") return <main className="app-page">Loading…</main>;
  if (load.state === "missing" || !slug)
    return (
      <main className="app-page">
        <h1>This app is not available</h1>
        <p>It may have been unpublished, or the link is incomplete.</p>
      </main>
    );
  const { app } = load;
  return (
    <main className="app-page">
      {app.cover_url && <img className="app-cover" src={app.cover_url} alt="" />}
      <h1>{app.title}</h1>
      {app.description && <p className="app-description">{app.description}</p>}
      <RunForm slug={slug} app={app} onStarted={started} />
      {current && <RunView key={current.run_id} slug={slug} run={current} />}
      {recent.length > 1 && (
        <section aria-labelledby="recent-title">
          <h2 id="recent-title">Your recent runs</h2>
          <ul className="app-recent">
            {recent.map((r) => (
              <li key={r.run_id}>
                <button type="button" onClick={() => setCurrent(r)} aria-pressed={r === current}>
                  {new Date(r.created_at).toLocaleString()}
                </button>
              </li>
            ))}
          </ul>
        </section>
      )}
    </main>
  );
}

function RunForm({
  slug,
  app,
  onStarted,
}: {
  slug: string;
  app: PublicApp;
  onStarted: (run: Recent) => void;
}) {
  const [values, setValues] = useState<Record<string, string>>(() =>
    Object.fromEntries(
      app.inputs.filter((f) => f.kind === "text").map((f) => [f.key, f.default ?? ""]),
    ),
  );
  const [files, setFiles] = useState<Record<string, File | undefined>>({});
  const [password, setPassword] = useState("");
  const [busy, setBusy] = useState<string | null>(null);
  const [error, setError] = useState<string | null>(null);
  // The form's challenge serves one run; the next one reads the form again for a new one.
  const challenge = useRef<Challenge | null>(app.challenge ?? null);

  async function proof(): Promise<Record<string, string>> {
    if (!app.challenge) return {};
    let next = challenge.current;
    challenge.current = null;
    if (!next || !usable(next)) {
      const r = await fetch(apiPath(slug));
      next = r.ok ? (((await r.json()) as PublicApp).challenge ?? null) : null;
      if (!next) return {};
    }
    setBusy("Checking this browser…");
    const solution = await solve(next.token, next.bits);
    return { "X-App-Challenge": next.token, "X-App-Solution": solution };
  }

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy("Starting…");
    setError(null);
    const { body, json } = runBody(app.inputs, values, files);
    const headers: Record<string, string> = { "X-Visitor-Session": visitorSession(localStorage) };
    if (json) headers["Content-Type"] = "application/json";
    if (app.password_required) headers["X-App-Password"] = password;
    try {
      Object.assign(headers, await proof());
      setBusy("Starting…");
      const r = await fetch(apiPath(slug, "/runs"), { method: "POST", body, headers });
      if (!r.ok) return setError(await problemText(r));
      const accepted = (await r.json()) as { run_id: string; visitor_token: string };
      onStarted({
        run_id: accepted.run_id,
        token: accepted.visitor_token,
        created_at: new Date().toISOString(),
      });
    } catch {
      setError("The server could not be reached.");
    } finally {
      setBusy(null);
    }
  }

  return (
    <form className="app-form" onSubmit={(e) => void submit(e)}>
      {app.inputs.map((field) => (
        <Field
          key={field.key}
          field={field}
          value={values[field.key] ?? ""}
          onText={(v) => setValues((old) => ({ ...old, [field.key]: v }))}
          onFile={(f) => setFiles((old) => ({ ...old, [field.key]: f }))}
        />
      ))}
      {app.password_required && (
        <label>
          Password
          <input
            type="password"
            value={password}
            onChange={(e) => setPassword(e.target.value)}
            required
          />
        </label>
      )}
      {error && (
        <p role="alert" className="app-error">
          {error}
        </p>
      )}
      <button type="submit" disabled={busy !== null}>
        {busy ?? "Run"}
      </button>
    </form>
  );
}

const ACCEPT: Record<string, string> = { image: "image/*", audio: "audio/*", video: "video/*" };

function Field({
  field,
  value,
  onText,
  onFile,
}: {
  field: FormField;
  value: string;
  onText: (value: string) => void;
  onFile: (file: File | undefined) => void;
}) {
  const id = `field-${field.key}`;
  const help = field.help ? <small id={`${id}-help`}>{field.help}</small> : null;
  if (field.kind === "text")
    return (
      <div className="app-field">
        <label htmlFor={id}>{field.label}</label>
        <textarea
          id={id}
          value={value}
          maxLength={field.max_length}
          required={field.required}
          rows={field.max_length > 200 ? 5 : 2}
          aria-describedby={help ? `${id}-help` : undefined}
          onChange={(e) => onText(e.target.value)}
        />
        {help}
      </div>
    );
  return (
    <div
      className="app-field app-drop"
      onDragOver={(e) => e.preventDefault()}
      onDrop={(e) => {
        e.preventDefault();
        onFile(e.dataTransfer.files[0]);
      }}
    >
      <label htmlFor={id}>{field.label}</label>
      <input
        id={id}
        type="file"
        accept={ACCEPT[field.kind]}
        capture={field.kind === "image" ? "environment" : undefined}
        required={field.required}
        aria-describedby={help ? `${id}-help` : undefined}
        onChange={(e) => onFile(e.target.files?.[0])}
      />
      {help}
    </div>
  );
}

function RunView({ slug, run }: { slug: string; run: Recent }) {
  const [record, setRecord] = useState<VisitorRun | null>(null);
  const [gone, setGone] = useState(false);

  useEffect(() => {
    const url = `${apiPath(slug, `/runs/${run.run_id}/events`)}?token=${encodeURIComponent(run.token)}`;
    const source = new EventSource(url);
    source.addEventListener("run", (e) => {
      const next = JSON.parse((e as MessageEvent<string>).data) as VisitorRun;
      setRecord(next);
      if (next.status !== "running") source.close();
    });
    source.addEventListener("closed", () => {
      setGone(true);
      source.close();
    });
    source.onerror = () => {
      if (source.readyState === EventSource.CLOSED) setGone((g) => g || record === null);
    };
    return () => source.close();
    // record is read only to tell a failed first connection from a finished stream
    // eslint-disable-next-line react-hooks/exhaustive-deps
  }, [slug, run.run_id, run.token]);

  if (gone && !record) return <p className="app-error">This run is no longer available.</p>;
  if (!record) return <p aria-live="polite">Starting…</p>;
  return (
    <section className="app-run" aria-live="polite" data-status={record.status}>
      <p>
        <span className="app-status">{record.status}</span>
        {record.status === "running" && (
          <progress value={record.progress} max={1} aria-label="Progress" />
        )}
      </p>
      {record.error && <p className="app-error">{record.error.message}</p>}
      <div className="app-outputs">
        {record.outputs.map((out) => (
          <figure key={out.node_id}>
            <figcaption>{out.label}</figcaption>
            <Output out={out} />
          </figure>
        ))}
      </div>
    </section>
  );
}

function Output({ out }: { out: VisitorRun["outputs"][number] }) {
  if (!out.url) return <p className="app-muted">{out.status === "completed" ? "—" : "Waiting…"}</p>;
  const type = out.content_type ?? "";
  const media = type.startsWith("image/") ? (
    <img src={out.url} alt={out.label} />
  ) : type.startsWith("audio/") ? (
    <audio src={out.url} controls />
  ) : type.startsWith("video/") ? (
    <video src={out.url} controls playsInline />
  ) : (
    <pre>{out.text}</pre>
  );
  return (
    <>
      {media}
      <a className="app-download" href={out.url} download>
        Download
      </a>
    </>
  );
}
