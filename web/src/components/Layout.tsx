import { NavLink, Outlet } from "react-router";
import { clearToken } from "../api/session";
import { useApprovals, useMe } from "../api/queries";
import { UploadIndicator } from "../assets/UploadList";
import { useState } from "react";
import { chooseTheme, storedTheme, type ThemeChoice } from "../theme/theme";

export function Layout() {
  const me = useMe();
  const waiting = useApprovals().data?.count ?? 0;
  return (
    <div className="layout">
      <header className="topbar">
        <a className="brand" href="/workflows">
          <img src="/favicon.svg" alt="" width={22} height={22} />
          <span className="brand-name">Nodeloom</span>
        </a>
        <nav aria-label="Main">
          <NavLink to="/workflows">Workflows</NavLink>
          <NavLink to="/runs" end>
            Runs
          </NavLink>
          <NavLink to="/assets">Assets</NavLink>
          <NavLink to="/apps" end>
            Apps
          </NavLink>
          <NavLink to="/approvals">
            Needs approval
            {waiting > 0 && (
              <span className="badge" aria-label={`${waiting} waiting`}>
                {waiting}
              </span>
            )}
          </NavLink>
          <NavLink to="/profile">Profile</NavLink>
          {me.data?.operator && <NavLink to="/operator">Servers</NavLink>}
          <a href="/api/v1/docs">API docs</a>
        </nav>
        <span className="spacer" />
        <UploadIndicator />
        {me.data && (
          <span className="muted small who">
            {me.data.email} · {me.data.credits_balance.toLocaleString()} credits
          </span>
        )}
        <ThemePicker />
        <button type="button" onClick={clearToken}>
          Log out
        </button>
      </header>
      <Outlet />
    </div>
  );
}

/** Light, dark, or as the system says (the default); kept in this browser. */
function ThemePicker() {
  const [choice, setChoice] = useState<ThemeChoice>(() => {
    try {
      return storedTheme(window.localStorage);
    } catch {
      return "system";
    }
  });
  return (
    <select
      aria-label="Theme"
      className="theme-picker"
      value={choice}
      onChange={(event) => {
        const next = event.target.value as ThemeChoice;
        setChoice(next);
        chooseTheme(next);
      }}
    >
      <option value="system">Theme: system</option>
      <option value="light">Theme: light</option>
      <option value="dark">Theme: dark</option>
    </select>
  );
}
