import { useState } from "react";
import { Link } from "react-router";
import { useQueryClient } from "@tanstack/react-query";
import { ApiError, api, unwrap } from "../api/client";
import { keys } from "../api/queries";
import { setToken } from "../api/session";

type Mode = "setup" | "login" | "signup";

const TEXT: Record<Mode, { title: string; lead: string; button: string; busy: string }> = {
  setup: {
    title: "Welcome to Nodeloom",
    lead: "No account exists yet. Create the owner account of this server.",
    button: "Sign up",
    busy: "Creating your account…",
  },
  login: { title: "Log in", lead: "", button: "Log in", busy: "Logging in…" },
  signup: {
    title: "Create an account",
    lead: "",
    button: "Sign up",
    busy: "Creating your account…",
  },
};

export function AuthPage({ mode, canSignUp = false }: { mode: Mode; canSignUp?: boolean }) {
  const [email, setEmail] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState<string | null>(null);
  const [busy, setBusy] = useState(false);
  const client = useQueryClient();
  const text = TEXT[mode];

  async function submit(event: React.FormEvent) {
    event.preventDefault();
    setBusy(true);
    setError(null);
    try {
      if (mode !== "login") {
        unwrap(await api.POST("/api/v1/auth/signup", { body: { email, password } }));
      }
      const token = unwrap(await api.POST("/api/v1/auth/login", { body: { email, password } }));
      await client.invalidateQueries({ queryKey: keys.setup });
      // The app then leaves this page for the one first asked for (App.tsx).
      setToken(token.access_token, token.expires_in);
    } catch (exc) {
      setError(exc instanceof ApiError ? exc.message : "The server could not be reached.");
    } finally {
      setBusy(false);
    }
  }

  return (
    <main className="card auth-card">
      <h1>{text.title}</h1>
      {text.lead && <p className="muted">{text.lead}</p>}
      <form onSubmit={submit}>
        {error && (
          <div className="banner error" role="alert">
            {error}
          </div>
        )}
        <div className="field">
          <label htmlFor="email">Email</label>
          <input
            id="email"
            type="email"
            autoComplete="email"
            required
            value={email}
            onChange={(e) => setEmail(e.target.value)}
          />
        </div>
        <div className="field">
          <label htmlFor="password">Password</label>
          <input
            id="password"
            type="password"
            autoComplete={mode === "login" ? "current-password" : "new-password"}
            required
            minLength={mode === "login" ? undefined : 8}
            value={password}
            onChange={(e) => setPassword(e.target.value)}
          />
          {mode !== "login" && <div className="hint">At least 8 characters.</div>}
        </div>
        <button type="submit" className="primary" disabled={busy} aria-busy={busy || undefined}>
          {busy ? text.busy : text.button}
        </button>
        {busy && (
          // Hashing the password takes a moment on purpose (it is what makes a stolen hash
          // slow to crack): say that something is happening.
          <p className="small muted" role="status">
            {text.busy}
          </p>
        )}
      </form>
      {mode === "login" && canSignUp && (
        <p className="small" style={{ marginTop: 16 }}>
          No account? <Link to="/signup">Sign up</Link>
        </p>
      )}
      {mode === "signup" && (
        <p className="small" style={{ marginTop: 16 }}>
          {canSignUp ? "" : "Sign-up is closed on this server. "}
          Have an account? <Link to="/login">Log in</Link>
        </p>
      )}
    </main>
  );
}
