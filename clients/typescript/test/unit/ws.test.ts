import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, type ClientConfig } from "../../src/client.js";
import { PermanentError } from "../../src/errors.js";
import type { WebSocketCtor, WebSocketLike } from "../../src/transport_ws.js";
import type { Status } from "../../src/client.js";
import { FakeServer, waitFor } from "./fakeserver.js";

type Script = (ws: FakeWs, hello: { after: number; epoch?: number }) => void;

/** FakeWs is a server-side script behind the WebSocketLike surface. */
class FakeWs implements WebSocketLike {
  readyState = 0;
  onopen: ((ev: unknown) => void) | null = null;
  onmessage: ((ev: { data: unknown }) => void) | null = null;
  onclose: ((ev: { code: number; reason: string }) => void) | null = null;
  onerror: ((ev: unknown) => void) | null = null;
  constructor(readonly url: string, private readonly script: Script, refuse?: number) {
    setTimeout(() => {
      if (refuse) {
        this.onerror?.({ message: `Unexpected server response: ${refuse}` });
        this.onclose?.({ code: 1006, reason: "" });
        return;
      }
      this.readyState = 1;
      this.onopen?.({});
    }, 1);
  }
  send(data: string): void {
    const f = JSON.parse(data) as { type: string; after: number; epoch?: number };
    if (f.type === "hello") this.script(this, f);
  }
  push(frame: unknown): void {
    if (this.readyState === 1) this.onmessage?.({ data: JSON.stringify(frame) });
  }
  close(code = 1000, reason = ""): void {
    if (this.readyState === 3) return;
    this.readyState = 3;
    setTimeout(() => this.onclose?.({ code, reason }), 1);
  }
}

function fakeCtor(script: Script, refuse?: number): { ctor: WebSocketCtor; made: FakeWs[] } {
  const made: FakeWs[] = [];
  const ctor = class extends FakeWs {
    constructor(url: string) {
      super(url, script, refuse);
      made.push(this);
    }
  };
  return { ctor, made };
}

function config(srv: FakeServer, ctor: WebSocketCtor, extra: Partial<ClientConfig> = {}): ClientConfig {
  return { baseUrl: "http://fake", token: "t", fetch: (i, init) => srv.fetch(i, init), WebSocket: ctor, startupJitterMs: -1,
    longPollWaitSec: 1, backoffInitialMs: 5, backoffMaxMs: 20, gapWaitMs: 20, headWaitMs: 20, ...extra };
}

test("websocket: a push beyond a gap waits, then the missing entries are pulled over HTTP; order and once hold", async () => {
  const srv = new FakeServer();
  srv.add(4);
  const { ctor, made } = fakeCtor((ws, hello) => {
    ws.push({ type: "welcome", epoch: 1, head: 4, heartbeat_ms: 10000 });
    ws.push({ type: "entries", entries: srv.entries.filter((e) => e.inbox_seq === hello.after + 1), head: 4 });
    ws.push({ type: "entries", entries: srv.entries.slice(2), head: 4 }); // 2 never pushed
  });
  const got: number[] = [];
  const c = await Client.create(config(srv, ctor, { handlers: { onEntry: (e) => { got.push(e.inbox_seq); } } }));
  const run = c.start();
  await waitFor(() => got.length === 4, 3000, "4 entries");
  await c.stop();
  await run;
  assert.deepEqual(got, [1, 2, 3, 4]);
  assert.ok(srv.requests.some((r) => r.path.startsWith("/v1/sync?after=1")), "the gap was pulled from the cursor");
  assert.ok(made[0].url.includes("access_token=t"));
});

test("websocket: a heartbeat head beyond the cursor with no push leads to a pull", async () => {
  const srv = new FakeServer();
  srv.add(2);
  const { ctor } = fakeCtor((ws) => {
    ws.push({ type: "welcome", epoch: 1, head: 0, heartbeat_ms: 10000 });
    ws.push({ type: "heartbeat", head: 2 });
  });
  const got: number[] = [];
  const c = await Client.create(config(srv, ctor, { handlers: { onEntry: (e) => { got.push(e.inbox_seq); } } }));
  const run = c.start();
  await waitFor(() => got.length === 2, 3000, "2 entries");
  await c.stop();
  await run;
  assert.deepEqual(got, [1, 2]);
});

test("websocket: an upgrade refused with a 4xx falls back to long-polling at once", async () => {
  const srv = new FakeServer();
  srv.add(3);
  const { ctor, made } = fakeCtor(() => undefined, 400);
  const got: number[] = [];
  const statuses: Status[] = [];
  const c = await Client.create(config(srv, ctor, { handlers: { onEntry: (e) => { got.push(e.inbox_seq); }, onStatus: (s) => statuses.push(s) } }));
  const run = c.start();
  await waitFor(() => got.length === 3, 3000, "3 entries by polling");
  await c.stop();
  await run;
  assert.equal(made.length, 1, "one refused upgrade, then polling");
  assert.ok(statuses.some((s) => s.state === "connected" && s.transport === "polling"));
});

test("websocket: after wsFallbackAfter short sessions it polls, and goes back to the WebSocket after pollingPeriodMs", async () => {
  const srv = new FakeServer();
  srv.add(1);
  let sessions = 0;
  const { ctor } = fakeCtor((ws) => {
    sessions++;
    ws.push({ type: "welcome", epoch: 1, head: 1, heartbeat_ms: 10000 });
    if (sessions <= 2) ws.close(1012, "restart");
  });
  const statuses: Status[] = [];
  const c = await Client.create(config(srv, ctor, { wsFallbackAfter: 2, pollingPeriodMs: 100, handlers: { onStatus: (s) => statuses.push(s) } }));
  const run = c.start();
  await waitFor(() => sessions >= 3, 3000, "a third WebSocket session");
  await c.stop();
  await run;
  const connected = statuses.filter((s) => s.state === "connected").map((s) => (s as { transport: string }).transport);
  assert.deepEqual(connected.slice(0, 4), ["websocket", "websocket", "polling", "websocket"]);
});

test("websocket: close 4001 stops with a PermanentError; 4029 waits for the error frame's retry_after_ms", async () => {
  const srv = new FakeServer();
  const { ctor } = fakeCtor((ws) => {
    ws.push({ type: "error", code: "unauthorized", message: "no", retryable: false });
    ws.close(4001, "unauthorized");
  });
  const c = await Client.create(config(srv, ctor));
  const err = await c.start().then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof PermanentError);
  assert.equal(err.closeCode, 4001);

  const waits: Status[] = [];
  let n = 0;
  const { ctor: ctor2 } = fakeCtor((ws) => {
    if (n++ > 0) return;
    ws.push({ type: "error", code: "rate_limited", message: "slow down", retryable: true, retry_after_ms: 50 });
    ws.close(4029, "rate limited");
  });
  const c2 = await Client.create(config(srv, ctor2, { handlers: { onStatus: (s) => waits.push(s) } }));
  const run = c2.start();
  await waitFor(() => n >= 2, 3000, "the reconnect after 4029");
  await c2.stop();
  await run;
  const w = waits.find((s) => s.state === "waiting") as { reason: string } | undefined;
  assert.equal(w?.reason, "retry-after");
});

test("breaker: attempts that never get through open the circuit", async () => {
  const srv = new FakeServer();
  const { ctor } = fakeCtor((ws) => ws.close(1011, "internal")); // no welcome: never got through
  const statuses: Status[] = [];
  const c = await Client.create(config(srv, ctor, { transport: "websocket", breakerThreshold: 3, breakerCooldownMs: 60_000, handlers: { onStatus: (s) => statuses.push(s) } }));
  const run = c.start();
  await waitFor(() => statuses.some((s) => s.state === "circuit_open"), 3000, "the circuit to open");
  await c.stop();
  await run;
  const attempts = statuses.filter((s) => s.state === "connecting").length;
  assert.equal(attempts, 3);
});
