// The one WebSocket client: subscribes to a run on /api/v1/ws and hands each event to the
// caller (which folds it with reduceRun from runEvents.ts). The server replays a run's earlier
// events on subscribe, so nothing is missed between execute and subscribe; on a dropped
// connection it resubscribes after the last seq.
import { getToken } from "../api/session";
import { isTerminal, type RunEvent } from "./runEvents";

export type { RunEvent };

export function watchRun(runId: string, onEvent: (event: RunEvent) => void): () => void {
  let socket: WebSocket | null = null;
  let lastSeq = 0;
  let stopped = false;
  let retry: ReturnType<typeof setTimeout> | undefined;

  const open = () => {
    const token = getToken();
    if (!token || stopped) return;
    const scheme = window.location.protocol === "https:" ? "wss" : "ws";
    const url = `${scheme}://${window.location.host}/api/v1/ws?token=${encodeURIComponent(token)}`;
    socket = new WebSocket(url);
    socket.onopen = () => {
      const message: Record<string, unknown> = { type: "subscribe", run_id: runId };
      if (lastSeq > 0) message.after_seq = lastSeq;
      socket?.send(JSON.stringify(message));
    };
    socket.onmessage = (message) => {
      const event = JSON.parse(String(message.data)) as RunEvent;
      if (event.type === "ping") {
        socket?.send(JSON.stringify({ type: "pong" }));
        return;
      }
      if (typeof event.seq !== "number" || event.run_id !== runId || event.seq <= lastSeq) return;
      lastSeq = event.seq;
      onEvent(event);
      if (isTerminal(event.type)) {
        stopped = true;
        socket?.close(1000);
      }
    };
    socket.onclose = (close) => {
      // 4401: the credential is no longer valid; reconnecting would not help.
      if (!stopped && close.code !== 4401) retry = setTimeout(open, 1000);
    };
  };
  open();
  return () => {
    stopped = true;
    clearTimeout(retry);
    socket?.close(1000);
  };
}
