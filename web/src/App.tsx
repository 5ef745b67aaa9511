import { useEffect, useSyncExternalStore } from "react";
import { Navigate, Route, Routes, useLocation } from "react-router";
import { useQuery, useQueryClient } from "@tanstack/react-query";
import { api, unwrap } from "./api/client";
import { keys } from "./api/queries";
import { getToken, onSessionChange } from "./api/session";
import { Layout } from "./components/Layout";
import { AuthPage } from "./pages/AuthPage";
import { WorkflowsPage } from "./pages/WorkflowsPage";
import { EditorPage } from "./pages/EditorPage";
import { RunsPage } from "./pages/RunsPage";
import { RunPage } from "./pages/RunPage";
import { ApprovalsPage } from "./pages/ApprovalsPage";
import { ProfilePage } from "./pages/ProfilePage";
import { AssetsPage } from "./pages/AssetsPage";
import { SchedulesPage } from "./pages/SchedulesPage";
import { WebhooksPage } from "./pages/WebhooksPage";
import { AppsPage } from "./pages/AppsPage";
import { OperatorPage } from "./pages/OperatorPage";

/** After logging in: the page the visitor first asked for, else the workflows. */
function BackToWhereItWas() {
  const from = (useLocation().state as { from?: string } | null)?.from;
  return <Navigate to={from && from !== "/" ? from : "/workflows"} replace />;
}

function useToken(): string | null {
  return useSyncExternalStore(onSessionChange, getToken);
}

export function App() {
  const token = useToken();
  const location = useLocation();
  const client = useQueryClient();
  const setup = useQuery({
    queryKey: keys.setup,
    queryFn: async () => unwrap(await api.GET("/api/v1/auth/setup")),
    enabled: !token,
  });
  useEffect(() => {
    if (!token) client.removeQueries({ predicate: (q) => q.queryKey[0] !== "setup" });
  }, [token, client]);

  if (!token) {
    if (setup.isPending) return <p className="page">Loading…</p>;
    const needsSetup = setup.data?.setup_required ?? false;
    const from = location.pathname + location.search;
    const canSignUp = setup.data?.signup_enabled ?? false;
    // Until the owner account exists, every way in leads to the set-up page.
    const gate = (page: React.ReactNode) => (needsSetup ? <Navigate to="/setup" replace /> : page);
    return (
      <Routes>
        <Route
          path="/setup"
          element={needsSetup ? <AuthPage mode="setup" /> : <Navigate to="/login" replace />}
        />
        <Route path="/signup" element={gate(<AuthPage mode="signup" canSignUp={canSignUp} />)} />
        <Route path="/login" element={gate(<AuthPage mode="login" canSignUp={canSignUp} />)} />
        <Route
          path="*"
          element={<Navigate to={needsSetup ? "/setup" : "/login"} replace state={{ from }} />}
        />
      </Routes>
    );
  }
  return (
    <Routes>
      <Route element={<Layout />}>
        <Route path="/" element={<Navigate to="/workflows" replace />} />
        <Route path="/workflows" element={<WorkflowsPage />} />
        <Route path="/workflows/:workflowId" element={<EditorPage />} />
        <Route path="/workflows/:workflowId/runs" element={<RunsPage />} />
        <Route path="/workflows/:workflowId/runs/:runId" element={<RunPage />} />
        <Route path="/workflows/:workflowId/webhooks" element={<WebhooksPage />} />
        <Route path="/workflows/:workflowId/schedules" element={<SchedulesPage />} />
        <Route path="/runs" element={<RunsPage />} />
        <Route path="/assets" element={<AssetsPage />} />
        <Route path="/apps" element={<AppsPage />} />
        <Route path="/approvals" element={<ApprovalsPage />} />
        <Route path="/profile" element={<ProfilePage />} />
        <Route path="/operator" element={<OperatorPage />} />
        <Route path="/login" element={<BackToWhereItWas />} />
        <Route path="/setup" element={<BackToWhereItWas />} />
        <Route path="/signup" element={<BackToWhereItWas />} />
        <Route
          path="*"
          element={
            <p className="page">
              No such page. <a href="/workflows">Workflows</a>
            </p>
          }
        />
      </Route>
    </Routes>
  );
}
