/**
 * Whether a URL names a host the server refuses by default (nodes that reach the network
 * refuse private, loopback and link-local addresses unless the operator's allow-list names
 * them): a ComfyUI on the same machine or the office network. Said by the form as the URL is
 * typed, rather than by the first run that fails. Only literal addresses and the names
 * that always mean this machine or a local network are known here; the server decides.
 */
export function privateHost(url: string): string | null {
  let host: string;
  try {
    host = new URL(url).hostname.toLowerCase().replace(/^\[|\]$/g, "");
  } catch {
    return null;
  }
  if (host === "localhost" || host.endsWith(".localhost") || host.endsWith(".local")) return host;
  if (host.endsWith(".lan") || host.endsWith(".internal") || !host.includes(".")) {
    return host.includes(":") ? privateV6(host) : host;
  }
  const v4 = host.match(/^(\d+)\.(\d+)\.(\d+)\.(\d+)$/);
  if (v4) {
    const [a, b] = [Number(v4[1]), Number(v4[2])];
    const blocked =
      a === 10 ||
      a === 127 ||
      a === 0 ||
      (a === 169 && b === 254) ||
      (a === 172 && b >= 16 && b <= 31) ||
      (a === 192 && b === 168) ||
      (a === 100 && b >= 64 && b <= 127);
    return blocked ? host : null;
  }
  return null;
}

function privateV6(host: string): string | null {
  return host === "::1" || /^f[cd]/.test(host) || /^fe[89ab]/.test(host) ? host : null;
}
