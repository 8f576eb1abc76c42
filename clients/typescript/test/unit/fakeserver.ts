// A fake gateway behind a fetch function: GET /v1/sync over a list of
// entries, POST messages with a scripted sequence of answers. For the unit
// tests of ordering, the once rule, retries and permanent errors.
import type { Entry } from "../../src/protocol.js";

export interface Scripted {
  status: number;
  body?: unknown;
  headers?: Record<string, string>;
}

export class FakeServer {
  entries: Entry[] = [];
  epoch = 1;
  /** answers taken first, one per request, before the normal behaviour. */
  script: Scripted[] = [];
  /** sync pages are served with these extra entries mixed in (duplicates, out of order). */
  noise: (page: Entry[]) => Entry[] = (p) => p;
  requests: { method: string; path: string; body?: unknown }[] = [];
  posted = new Map<string, number>();

  fetch = async (input: string, init?: RequestInit): Promise<Response> => {
    const url = new URL(input);
    const method = init?.method ?? "GET";
    const body = typeof init?.body === "string" ? (JSON.parse(init.body) as unknown) : undefined; // the client sends JSON text
    this.requests.push({ method, path: url.pathname + url.search, body });
    const s = this.script.shift();
    if (s) return json(s.status, s.body ?? { error: { code: "x", message: "scripted", retryable: s.status >= 500 } }, s.headers);
    if (url.pathname === "/v1/sync") return this.sync(url, init?.signal ?? undefined);
    const m = /^\/v1\/conversations\/(\d+)\/messages$/.exec(url.pathname);
    if (m && method === "POST") return this.post(Number(m[1]), body as { msg_id: string; body: string });
    return json(404, { error: { code: "not_found", message: "no route", retryable: false } });
  };

  add(n: number, cid = 1): void {
    for (let i = 0; i < n; i++) {
      const seq = this.entries.length + 1;
      this.entries.push({
        inbox_seq: seq, conversation_id: cid, kind: "message",
        message: { conversation_id: cid, seq, msg_id: `m${seq}`, sender_id: 2, kind: "text", body: `msg ${seq}`, created_at: new Date(0).toISOString() },
      });
    }
  }

  private async sync(url: URL, signal?: AbortSignal): Promise<Response> {
    const after = Number(url.searchParams.get("after") ?? 0);
    const limit = Number(url.searchParams.get("limit") ?? 50);
    const rest = this.entries.filter((e) => e.inbox_seq > after);
    if (rest.length === 0 && Number(url.searchParams.get("wait") ?? 0) > 0) {
      await new Promise((r) => { const t = setTimeout(r, 20); signal?.addEventListener("abort", () => { clearTimeout(t); r(undefined); }); });
    }
    const page = rest.slice(0, limit);
    const head = this.entries.length;
    return json(200, {
      epoch: this.epoch, head, entries: this.noise(page), has_more: rest.length > limit,
      unread_total: 0, mention_total: 0, _polling: { next_interval_ms: 0 },
    });
  }

  private post(cid: number, b: { msg_id: string; body: string }): Response {
    this.posted.set(b.msg_id, (this.posted.get(b.msg_id) ?? 0) + 1);
    return json(201, { conversation_id: cid, seq: 1, msg_id: b.msg_id, sender_id: 1, kind: "text", body: b.body, created_at: new Date(0).toISOString() });
  }
}

function json(status: number, body: unknown, headers: Record<string, string> = {}): Response {
  return new Response(status === 304 ? null : JSON.stringify(body), { status, headers: { "Content-Type": "application/json", ...headers } });
}

/** waitFor polls cond every 5 ms until it holds or ms pass. */
export async function waitFor(cond: () => boolean, ms = 5000, what = "condition"): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 5));
  }
}
