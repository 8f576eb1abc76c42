// A real `inboxd dev` stopped and started again under a running client: a
// gateway restart, and a replay (`inboxd replay`, a new epoch) in between.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import WebSocket from "ws";
import { Client, devToken, type Record as ConvRecord, type Status, type TooLong, type WebSocketCtor } from "../../src/index.js";
import { FileStore } from "../../src/node.js";
import { startDev, run, type Dev } from "./dev.js";
import { Recorder, assertAscending, assertOnceInOrder, range, sendAll, settle, userApi, waitFor } from "./delivery.js";

let dev: Dev;

before(async () => { dev = await startDev(); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

const WS = WebSocket as unknown as WebSocketCtor;
// Short waits so that a restart of a few seconds is crossed quickly; the
// breaker's cooldown is short too, since a restart takes more than its
// threshold of failed attempts.
const quick = { startupJitterMs: -1, backoffInitialMs: 50, backoffMaxMs: 300, breakerCooldownMs: 300, requestTimeoutMs: 5000 };

test("a gateway restart (SIGTERM, same data dir and ports): the client reconnects by itself, every message once, in order", { timeout: 120_000 }, async () => {
  const alice = await userApi(dev.url, 1);
  const cid = await alice.createConversation("restart", [2]);
  const rec = new Recorder(() => cid);
  const connected: string[] = [];
  const bob = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, 2), WebSocket: WS, transport: "websocket", ...quick,
    handlers: { onEntry: rec.onEntry, onStatus: (s: Status) => { if (s.state === "connected") connected.push(s.transport); } },
  });
  const running = bob.start();
  try {
    await sendAll(alice, cid, range("m", 1, 5));
    await waitFor(() => rec.got.length >= 5, 30_000, "the 5 messages sent before the restart");
    const sessionsBefore = connected.length;
    await dev.restart();
    await sendAll(alice, cid, range("m", 6, 10));
    await waitFor(() => rec.got.length >= 10, 60_000, "the 5 messages sent after the restart");
    await settle();
    assert.ok(connected.length > sessionsBefore, "the client connected again");
    assert.ok(connected.every((t) => t === "websocket"), `transports: ${connected.join(",")}`);
  } finally {
    await bob.stop();
    await running;
  }
  assertOnceInOrder(rec.got, range("m", 1, 10));
  assertAscending(rec.inboxSeqs(), "inbox_seq of every entry");
});

test("inboxd replay (a new epoch), WebSocket and long-polling devices kept running, one restarted on its FileStore: too_long with the new epoch and the conversation list, then every later message once", { timeout: 180_000 }, async () => {
  const alice = await userApi(dev.url, 3);
  const cid = await alice.createConversation("replay", [4]);
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-epoch-"));
  const path = join(dir, "state.json");
  const token = await devToken(dev.url, 4);

  // Three devices of user 4: `live` (WebSocket) and `poll` (long-polling)
  // keep running across the stops and the replay (MemoryStore); `saved` is
  // stopped before and started again after on the same FileStore.
  type Device = { rec: Recorder; tooLongs: TooLong[]; lists: ConvRecord[][]; connects: number; client?: Client; running?: Promise<void> };
  const device = (): Device => {
    const d: Device = { rec: new Recorder(() => cid, () => d.client!.epoch), tooLongs: [], lists: [], connects: 0 };
    return d;
  };
  const live = device();
  const poll = device();
  const saved = device();
  const handlers = (d: Device) => ({
    onEntry: d.rec.onEntry,
    onTooLong: (t: TooLong) => { d.tooLongs.push(t); },
    onConversations: (rs: ConvRecord[]) => { d.lists.push(rs); },
    onStatus: (st: Status) => { if (st.state === "connected") d.connects++; },
  });
  const startDevice = async (d: Device, store?: FileStore) => {
    const transport = d === poll ? "polling" : "websocket";
    d.client = await Client.create({ baseUrl: dev.url, token, store, WebSocket: WS, transport, longPollWaitSec: 2, ...quick, handlers: handlers(d) });
    d.running = d.client.start();
  };
  const stopDevice = async (d: Device) => {
    await d.client?.stop();
    await d.running;
  };
  let store: FileStore | undefined;
  try {
    await startDevice(live);
    await startDevice(poll);
    store = await FileStore.open(path);
    await startDevice(saved, store);
    await sendAll(alice, cid, range("r", 1, 5));
    for (const d of [live, poll, saved]) await waitFor(() => d.rec.got.length >= 5, 30_000, "the 5 messages before the replay");
    const oldEpoch = live.client!.epoch;
    assert.ok(oldEpoch > 0);
    assert.equal(saved.client!.epoch, oldEpoch);
    assert.equal(poll.client!.epoch, oldEpoch);
    const savedCursor = saved.client!.cursor;
    await stopDevice(saved);
    await store.close();
    store = undefined;

    const connects = live.connects;
    // A replay's epoch notification wakes no session: a live WebSocket learns of
    // the new epoch at its next heartbeat read (20 s by default), so 1 s here.
    await dev.restart(["--no-fanout", "--ws-heartbeat", "1s"]);
    assert.match(dev.output(), /fanout off/);
    // The WebSocket device is connected to the gateway when the replay swaps the projections under it
    // (the long-polling one may poll across the restart without a failed request: it is not waited for).
    await waitFor(() => live.connects > connects, 30_000, "the WebSocket device connected to dev --no-fanout");
    const replayed = await run(dev.bin, ["replay", "--database-url", dev.databaseUrl, "--kafka-brokers", dev.brokers], 120_000);
    const newEpoch = Number(/new epoch (\d+)/.exec(replayed)?.[1]);
    assert.ok(newEpoch > oldEpoch, `replay printed a new epoch: ${replayed}`);
    // The WebSocket session gets its too_long as the epoch changes under it (websocket.md), before dev restarts.
    // The long-polling device may get its own now or from the restarted dev.
    await waitFor(() => live.tooLongs.length >= 1, 30_000, "the too_long on the live WebSocket");
    await dev.restart();

    store = await FileStore.open(path);
    const reopened = await store.load();
    assert.equal(reopened?.epoch, oldEpoch);
    assert.equal(reopened?.cursor, savedCursor);
    await startDevice(saved, store);
    for (const d of [live, poll, saved]) {
      await waitFor(() => d.tooLongs.length >= 1 && d.lists.length >= 1, 60_000, "the too_long of the new epoch");
    }
    await sendAll(alice, cid, range("r", 6, 10));
    for (const d of [live, poll, saved]) await waitFor(() => d.rec.got.length >= 10, 60_000, "the 5 messages after the replay");
    await settle();

    for (const [name, d] of [["live", live], ["poll", poll], ["saved", saved]] as const) {
      assert.equal(d.tooLongs.length, 1, `${name}: one too_long`);
      const t = d.tooLongs[0];
      assert.equal(t.previousEpoch, oldEpoch, `${name}: previousEpoch`);
      assert.equal(t.epoch, newEpoch, `${name}: the new epoch`);
      assert.notEqual(t.previousEpoch, t.epoch);
      assert.equal(d.client!.epoch, newEpoch);
      // Seqs are stable across a replay: the client had everything, so no history is missing.
      assert.deepEqual(t.newHoles, [], `${name}: no holes`);
      assert.deepEqual(d.client!.holes(cid), []);
      assert.equal(d.lists.length, 1, `${name}: one conversation list`);
      const r = d.lists[0].find((x) => x.conversation_id === cid);
      assert.ok(r, `${name}: the conversation is listed`);
      assertOnceInOrder(d.rec.got, range("r", 1, 10));
      // inbox_seqs ascend within each epoch (the new one numbers the inbox afresh).
      for (const e of [oldEpoch, newEpoch]) assertAscending(d.rec.inboxSeqs(e), `${name}: inbox_seq in epoch ${e}`);
      assert.deepEqual(d.rec.got.map((g) => g.epoch), [...Array<number>(5).fill(oldEpoch), ...Array<number>(5).fill(newEpoch)], `${name}: epochs`);
    }
    assert.equal(saved.tooLongs[0].previousCursor, savedCursor);
  } finally {
    await stopDevice(live);
    await stopDevice(poll);
    await stopDevice(saved);
    await store?.close();
    await rm(dir, { recursive: true, force: true });
  }
});
