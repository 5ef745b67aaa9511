import { NavLink, Outlet } from "react-router";
import { clearToken } from "../api/session";
import { useApprovals, useMe } from "../api/queries";

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
          <NavLink to="/approvals">
            Needs approval
            {waiting > 0 && (
              <span className="badge" aria-label={`${waiting} waiting`}>
                {waiting}
              </span>
            )}
          </NavLink>
          <NavLink to="/profile">Profile</NavLink>
          <a href="/api/v1/docs">API docs</a>
        </nav>
        <span className="spacer" />
        {me.data && (
          <span className="muted small who">
            {me.data.email} · {me.data.credits_balance.toLocaleString()} credits
          </span>
        )}
        <button type="button" onClick={clearToken}>
          Log out
        </button>
      </header>
      <Outlet />
    </div>
  );
}
