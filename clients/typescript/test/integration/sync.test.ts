import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { Api } from "../../src/api.js";
import { Client, devToken, type WebSocketCtor, type WebSocketLike } from "../../src/index.js";
import { FileStore } from "../../src/node.js";
import { startDev, type Dev } from "./dev.js";

let dev: Dev;

before(async () => { dev = await startDev(); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

async function api(user: number): Promise<Api> {
  const token = await devToken(dev.url, user);
  return new Api({ baseUrl: dev.url, token: () => token });
}

async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

test("every message once, in order, across a forced WebSocket close", { timeout: 120_000 }, async () => {
  const alice = await api(1);
  const cid = await alice.createConversation("ts", [2]);
  const sockets: WebSocketLike[] = [];
  const Tracked = class extends WebSocket {
    constructor(url: string) { super(url); sockets.push(this as unknown as WebSocketLike); }
  } as unknown as WebSocketCtor;
  const got: { seq: number; text: unknown; inbox: number }[] = [];
  const transports: string[] = [];
  const bob = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, 2), WebSocket: Tracked, startupJitterMs: -1, backoffInitialMs: 50, backoffMaxMs: 200,
    handlers: {
      onEntry: (e) => { if (e.kind === "message" && e.message?.kind === "text" && e.message.conversation_id === cid) got.push({ seq: e.message.seq, text: e.message.body, inbox: e.inbox_seq }); },
      onStatus: (s) => { if (s.state === "connected") transports.push(s.transport); },
    },
  });
  const run = bob.start();
  try {
    for (let i = 1; i <= 5; i++) await alice.send(cid, { msg_id: crypto.randomUUID(), body: `m${i}` });
    await waitFor(() => got.length >= 5, 30_000, "the first 5 messages");
    (sockets[sockets.length - 1] as unknown as WebSocket).terminate(); // the connection dies under the client
    for (let i = 6; i <= 10; i++) await alice.send(cid, { msg_id: crypto.randomUUID(), body: `m${i}` });
    await waitFor(() => got.length >= 10, 30_000, "all 10 messages");
    await new Promise((r) => setTimeout(r, 300)); // anything extra would show up now
  } finally {
    await bob.stop();
    await run;
  }
  const first = got[0].seq; // the conversation starts with its system message
  assert.deepEqual(got.map((g) => g.seq), Array.from({ length: 10 }, (_, i) => first + i));
  assert.deepEqual(got.map((g) => g.inbox), [...got.map((g) => g.inbox)].sort((a, b) => a - b));
  assert.deepEqual(got.map((g) => g.text), Array.from({ length: 10 }, (_, i) => `m${i + 1}`));
  assert.ok(sockets.length >= 2, "the client reconnected");
  assert.ok(transports.every((t) => t === "websocket") && transports.length >= 2, `transports: ${transports.join(",")}`);
});

test("long-polling only (no WebSocket given): every message once, in order", { timeout: 60_000 }, async () => {
  const alice = await api(3);
  const cid = await alice.createConversation("poll", [4]);
  const got: number[] = [];
  const c = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, 4), transport: "polling", startupJitterMs: -1, longPollWaitSec: 2,
    handlers: { onEntry: (e) => { if (e.message?.conversation_id === cid && e.message.kind === "text") got.push(e.message.seq); } },
  });
  const run = c.start();
  try {
    for (let i = 1; i <= 4; i++) await alice.send(cid, { msg_id: crypto.randomUUID(), body: `p${i}` });
    await waitFor(() => got.length >= 4, 30_000, "4 messages by long-poll");
  } finally {
    await c.stop();
    await run;
  }
  assert.equal(got.length, 4);
  assert.deepEqual(got, Array.from({ length: 4 }, (_, i) => got[0] + i));
});

test("the outbox survives a restart with the FileStore: same msg_id, one message", { timeout: 60_000 }, async () => {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-outbox-"));
  const path = join(dir, "state.json");
  const alice = await api(5);
  const cid = await alice.createConversation("outbox", [6]);
  const token = await devToken(dev.url, 5);
  try {
    // First run: queued while the gateway is unreachable (a dead port), then the app quits.
    let store = await FileStore.open(path);
    const offline = await Client.create({ baseUrl: "http://127.0.0.1:9", token, store, transport: "polling", startupJitterMs: -1, backoffInitialMs: 20, backoffMaxMs: 50 });
    const run1 = offline.start();
    const id = await offline.send(cid, "survives", { });
    await new Promise((r) => setTimeout(r, 200)); // a few failed attempts
    await offline.stop();
    await run1;
    await store.close();

    // Second run on the same file against the real gateway.
    store = await FileStore.open(path);
    const online = await Client.create({ baseUrl: dev.url, token, store, WebSocket: WebSocket as unknown as WebSocketCtor, startupJitterMs: -1 });
    assert.deepEqual(online.pending().map((p) => p.msgId), [id]);
    const run2 = online.start();
    const res = await online.waitSent(id);
    await online.stop();
    await run2;
    assert.equal(res?.message?.msg_id, id);
    assert.equal(online.pending().length, 0);
    assert.equal((await store.load())?.outbox.length, 0);
    await store.close();

    const hist = await alice.history(cid, 1_000_000, 100);
    assert.deepEqual(hist.messages.filter((m) => m.msg_id === id).length, 1);
    assert.equal(hist.messages.filter((m) => m.kind === "text").length, 1);
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
