import { test } from "node:test";
import assert from "node:assert/strict";
import { Client, type ClientConfig } from "../../src/client.js";
import { MemoryStore } from "../../src/store.js";
import { PermanentError } from "../../src/errors.js";
import { FakeServer, waitFor } from "./fakeserver.js";

function config(srv: FakeServer, extra: Partial<ClientConfig> = {}): ClientConfig {
  return {
    baseUrl: "http://fake", token: "t", fetch: (i, init) => srv.fetch(i, init), transport: "polling", startupJitterMs: -1,
    longPollWaitSec: 1, pageSize: 4, backoffInitialMs: 5, backoffMaxMs: 20, ...extra,
  };
}

test("client: long-polls every entry once, in order, across pages with duplicates and shuffled entries", async () => {
  const srv = new FakeServer();
  srv.add(10);
  srv.noise = (p) => [...p, ...p.slice(0, 2)].reverse();
  const got: number[] = [];
  const store = new MemoryStore();
  const c = await Client.create(config(srv, { store, handlers: { onEntry: (e) => { got.push(e.inbox_seq); } } }));
  const run = c.start();
  await waitFor(() => got.length >= 10, 5000, "10 entries");
  srv.add(3);
  await waitFor(() => got.length >= 13, 5000, "13 entries");
  await c.stop();
  await run;
  assert.deepEqual(got, Array.from({ length: 13 }, (_, i) => i + 1));
  assert.equal(store.snapshot()?.cursor, 13);
  assert.equal(store.snapshot()?.epoch, 1);
});

test("client: restarted on the same store, it gets only what came since", async () => {
  const srv = new FakeServer();
  srv.add(5);
  const store = new MemoryStore();
  const got: number[] = [];
  const mk = () => Client.create(config(srv, { store, handlers: { onEntry: (e) => { got.push(e.inbox_seq); } } }));
  const a = await mk();
  const ra = a.start();
  await waitFor(() => got.length === 5);
  await a.stop();
  await ra;
  srv.add(2);
  const b = await mk();
  const rb = b.start();
  await waitFor(() => got.length === 7);
  await b.stop();
  await rb;
  assert.deepEqual(got, [1, 2, 3, 4, 5, 6, 7]);
  assert.ok(srv.requests.some((r) => r.path.startsWith("/v1/sync?after=5&epoch=1")), "the second run resumes at the saved cursor and epoch");
});

test("client: a handler error stops start() and the entry comes again on the next start", async () => {
  const srv = new FakeServer();
  srv.add(3);
  const store = new MemoryStore();
  let fail = true;
  const got: number[] = [];
  const handlers = { onEntry: (e: { inbox_seq: number }) => { if (e.inbox_seq === 2 && fail) throw new Error("no"); got.push(e.inbox_seq); } };
  const a = await Client.create(config(srv, { store, handlers }));
  await assert.rejects(a.start(), /handler onEntry failed/);
  assert.equal(store.snapshot()?.cursor, 1);
  fail = false;
  const b = await Client.create(config(srv, { store, handlers }));
  const rb = b.start();
  await waitFor(() => got.length === 3);
  await b.stop();
  await rb;
  assert.deepEqual(got, [1, 2, 3]);
});

test("client: 429 and 503 are retried after Retry-After; a 401 after a token refresh stops with a PermanentError", async () => {
  const srv = new FakeServer();
  srv.add(1);
  srv.script = [{ status: 429, headers: { "Retry-After": "0" } }, { status: 503 }];
  const got: number[] = [];
  const c = await Client.create(config(srv, { handlers: { onEntry: (e) => { got.push(e.inbox_seq); } } }));
  const run = c.start();
  await waitFor(() => got.length === 1);
  await c.stop();
  await run;

  const srv2 = new FakeServer();
  let asked = 0;
  srv2.script = [{ status: 401 }, { status: 401 }];
  const c2 = await Client.create(config(srv2, { token: (refresh) => { asked++; return refresh ? "new" : "old"; } }));
  const err = await c2.start().then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof PermanentError, String(err));
  assert.equal(err.status, 401);
  assert.equal(asked, 2, "the token source is asked again once after a 401");
});

test("client: a 403 on sync stops; a network error does not", async () => {
  const srv = new FakeServer();
  let n = 0;
  const inner = srv.fetch;
  srv.fetch = async (i, init) => {
    if (n++ === 0) throw new TypeError("fetch failed");
    return inner(i, init);
  };
  srv.script = [];
  const c = await Client.create(config(srv, {}));
  srv.script.push({ status: 403, body: { error: { code: "forbidden", message: "no", retryable: false } } });
  const err = await c.start().then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof PermanentError);
  assert.equal(err.status, 403);
  assert.equal(n, 2, "the network error was retried");
});

test("outbox: the msg_id is saved before any attempt and kept across retries until a seq", async () => {
  const srv = new FakeServer();
  srv.script = []; // sync answers normally; posts fail twice
  const store = new MemoryStore();
  const c = await Client.create(config(srv, { store, handlers: {} }));
  const id = await c.send(1, "hello", { replyTo: 4, mentions: [3] });
  assert.equal(store.snapshot()?.outbox[0]?.msgId, id);
  assert.equal(store.snapshot()?.outbox[0]?.replyTo, 4);
  const inner = srv.fetch;
  let posts = 0;
  srv.fetch = async (i, init) => {
    if (init?.method === "POST" && posts++ < 2) return new Response(JSON.stringify({ error: { code: "unavailable", message: "", retryable: true } }), { status: 503, headers: { "Retry-After": "0" } });
    return inner(i, init);
  };
  const run = c.start();
  const res = await c.waitSent(id);
  await c.stop();
  await run;
  assert.equal(res?.message?.msg_id, id);
  assert.equal(posts, 3);
  assert.equal(store.snapshot()?.outbox.length, 0);
  const bodies = srv.requests.filter((r) => r.method === "POST").map((r) => r.body as { msg_id: string; reply_to: number; mentions: number[] });
  assert.deepEqual(bodies.map((b) => [b.msg_id, b.reply_to, b.mentions]), [[id, 4, [3]]]);
});

test("outbox: a permanent refusal ends the send with its error and does not stop the client", async () => {
  const srv = new FakeServer();
  const results: unknown[] = [];
  const c = await Client.create(config(srv, { handlers: { onSendResult: (r) => results.push(r) } }));
  const inner = srv.fetch;
  srv.fetch = async (i, init) => init?.method === "POST"
    ? new Response(JSON.stringify({ error: { code: "not_member", message: "no", retryable: false } }), { status: 403 })
    : inner(i, init);
  const run = c.start();
  const id = await c.send(9, "x");
  const res = await c.waitSent(id);
  assert.equal(res?.error?.status, 403);
  assert.equal(results.length, 1);
  await c.stop();
  await run;
  await assert.rejects(c.send(1, ""), /empty/);
});
