import { test } from "node:test";
import assert from "node:assert/strict";
import { Inbox, Saver, addHole, punch } from "../../src/inbox.js";
import { MemoryStore, emptyState } from "../../src/store.js";
import { HandlerError } from "../../src/errors.js";
import type { Entry } from "../../src/protocol.js";

function entry(seq: number, cid = 1, mseq = seq): Entry {
  return { inbox_seq: seq, conversation_id: cid, kind: "message",
    message: { conversation_id: cid, seq: mseq, msg_id: `m${seq}`, sender_id: 2, kind: "text", body: "x", created_at: "" } };
}

function setup(onEntry: (e: Entry) => void | Promise<void>) {
  const store = new MemoryStore();
  const state = emptyState();
  const inbox = new Inbox(state, new Saver(store, state), { onEntry });
  return { store, state, inbox };
}

test("inbox: entries in inbox order, each once; duplicates and entries at or below the cursor are dropped", async () => {
  const got: number[] = [];
  const { inbox, store } = setup((e) => { got.push(e.inbox_seq); });
  assert.equal(await inbox.apply([entry(2), entry(1), entry(3), entry(2)]), "ok");
  assert.equal(await inbox.apply([entry(1), entry(3), entry(4)]), "ok");
  assert.deepEqual(got, [1, 2, 3, 4]);
  assert.equal(store.snapshot()?.cursor, 4);
});

test("inbox: an entry beyond cursor+1 is a gap: nothing past it is delivered", async () => {
  const got: number[] = [];
  const { inbox } = setup((e) => { got.push(e.inbox_seq); });
  assert.equal(await inbox.apply([entry(1), entry(3), entry(4)]), "gap");
  assert.deepEqual(got, [1]);
  assert.equal(inbox.cursor, 1);
  assert.equal(await inbox.apply([entry(2), entry(3), entry(4)]), "ok");
  assert.deepEqual(got, [1, 2, 3, 4]);
});

test("inbox: the cursor moves and is saved only after the handler resolved; a failing handler gets the entry again", async () => {
  let fail = true;
  const got: number[] = [];
  const { inbox, store } = setup(async (e) => {
    await new Promise((r) => setTimeout(r, 1));
    if (e.inbox_seq === 3 && fail) throw new Error("disk full");
    got.push(e.inbox_seq);
  });
  await assert.rejects(inbox.apply([entry(1), entry(2), entry(3), entry(4)]), HandlerError);
  assert.equal(inbox.cursor, 2);
  assert.equal(store.snapshot()?.cursor, 2);
  fail = false;
  await inbox.apply([entry(1), entry(2), entry(3), entry(4)]);
  assert.deepEqual(got, [1, 2, 3, 4]);
});

test("inbox: handlers never run concurrently, even when pages are applied at once", async () => {
  let inside = 0;
  let maxInside = 0;
  const got: number[] = [];
  const { inbox } = setup(async (e) => {
    inside++;
    maxInside = Math.max(maxInside, inside);
    await new Promise((r) => setTimeout(r, 2));
    got.push(e.inbox_seq);
    inside--;
  });
  await Promise.all([inbox.apply([entry(1), entry(2)]), inbox.apply([entry(2), entry(3)]), inbox.apply([entry(1), entry(3), entry(4)])]);
  assert.equal(maxInside, 1);
  assert.deepEqual(got, [1, 2, 3, 4]);
});

test("inbox: too_long records holes, jumps to the head after onTooLong, then hands over the list", async () => {
  const store = new MemoryStore();
  const state = emptyState();
  const calls: string[] = [];
  const inbox = new Inbox(state, new Saver(store, state), {
    onEntry: () => { calls.push("entry"); },
    onTooLong: (t) => { calls.push(`toolong ${t.head} ${JSON.stringify(t.newHoles)}`); assert.equal(store.snapshot()?.cursor ?? 0, 1); },
    onConversations: (rs) => { calls.push(`list ${rs.length}`); },
  });
  await inbox.apply([entry(1, 7, 1)]);
  const rec = (cid: number, last: number) => ({ conversation_id: cid, title: "", pinned: false, muted: false, read_seq: 0, last_seq: last,
    last_message: null, version: 3, removed: false, unread_count: 0, mention_count: 0 });
  await inbox.tooLong({ too_long: true, epoch: 2, head: 900, record_version: 3, conversations: [rec(7, 40)], next_page: "p2" },
    async () => ({ conversations: [rec(8, 5)], next_page: null }));
  assert.deepEqual(calls, ["entry", 'toolong 900 [{"conversationId":7,"hole":{"from":2,"to":40}},{"conversationId":8,"hole":{"from":1,"to":5}}]', "list 2"]);
  assert.equal(store.snapshot()?.cursor, 900);
  assert.equal(store.snapshot()?.epoch, 2);
  // a message in a hole is delivered and punched out; one skipping ahead records a hole
  await inbox.apply([entry(901, 7, 45)]);
  assert.deepEqual(inbox.conv(7).holes, [{ from: 2, to: 44 }]);
});

test("holes: merge and punch", () => {
  const c = { lastSeq: 0, recordVersion: 0, holes: [{ from: 1, to: 3 }] };
  addHole(c, { from: 4, to: 6 });
  addHole(c, { from: 10, to: 12 });
  assert.deepEqual(c.holes, [{ from: 1, to: 6 }, { from: 10, to: 12 }]);
  assert.deepEqual(punch(c.holes, 3, 11), [{ from: 1, to: 2 }, { from: 12, to: 12 }]);
});

// The Go SDK's TestUpdateDelivery: onEntry gets every entry; onUpdate only a
// version higher than any handed over (by a message entry read after the
// change, an update entry or a replay of both); an unknown kind moves the
// cursor; the versions survive a save and a load.
test("inbox: onUpdate only with a higher version, once across replays and restarts", async () => {
  const msg = (seq: number, version: number, text: string) =>
    ({ conversation_id: 7, seq, msg_id: `m${seq}`, sender_id: 2, kind: "text", body: text, created_at: "", version });
  const input: Entry[] = [
    { inbox_seq: 1, conversation_id: 7, kind: "message", message: msg(1, 0, "a") },
    { inbox_seq: 2, conversation_id: 7, kind: "message", message: msg(2, 2, "b edited") }, // read after its edit
    { inbox_seq: 3, conversation_id: 7, kind: "update", message: msg(1, 2, "a edited") },
    { inbox_seq: 4, conversation_id: 7, kind: "update", message: msg(2, 2, "b edited") }, // had it
    { inbox_seq: 5, conversation_id: 7, kind: "poll", message: msg(2, 9, "a kind of the future") },
    { inbox_seq: 6, conversation_id: 7, kind: "update", message: msg(1, 3, "a deleted") },
    { inbox_seq: 7, conversation_id: 7, kind: "update", message: msg(1, 2, "a edited") }, // older
  ];
  const store = new MemoryStore();
  const run = async (state: ReturnType<typeof emptyState>) => {
    const entries: number[] = [];
    const updates: unknown[] = [];
    const inbox = new Inbox(state, new Saver(store, state), {
      onEntry: (e) => { entries.push(e.inbox_seq); },
      onUpdate: (m) => { updates.push(m.body); },
    });
    await inbox.apply(input);
    await inbox.apply(input); // a replay: below the cursor, dropped
    return { entries, updates, inbox };
  };
  const first = await run(emptyState());
  assert.deepEqual(first.entries, [1, 2, 3, 4, 5, 6, 7]);
  assert.deepEqual(first.updates, ["a edited", "a deleted"]);
  assert.equal(first.inbox.cursor, 7);
  assert.deepEqual(store.snapshot()!.conversations["7"].versions, { "1": 3, "2": 2 });

  // Restarted from an older cursor (a crash before the save): no update twice.
  const saved = store.snapshot()!;
  saved.cursor = 2;
  const again = await run(saved);
  assert.deepEqual(again.entries, [3, 4, 5, 6, 7]);
  assert.deepEqual(again.updates, []);
});

// After a too_long, the messages delivered before the jump are stale: their
// update entries were skipped. Backfill's pages hand those with a higher
// version to onUpdate, fresh ones (in holes) to onHistory, and close both.
test("inbox: too_long marks delivered messages stale; a page hands changed ones to onUpdate", async () => {
  const history: number[] = [];
  const updates: number[] = [];
  let info: unknown;
  const store = new MemoryStore();
  const state = emptyState();
  const inbox = new Inbox(state, new Saver(store, state), {
    onTooLong: (t) => { info = t; },
    onHistory: (_cid, ms) => { history.push(...ms.map((m) => m.seq)); },
    onUpdate: (m) => { updates.push(m.seq); },
  });
  await inbox.apply([entry(1, 1, 1), entry(2, 1, 2), entry(3, 1, 3)]);
  const rec = { conversation_id: 1, title: "", pinned: false, muted: false, read_seq: 0, last_seq: 6, last_message: null, version: 2, removed: false, unread_count: 0, mention_count: 0 };
  await inbox.tooLong({ too_long: true, epoch: 0, head: 20, record_version: 2, conversations: [rec], next_page: null } as never, async () => ({ conversations: [], next_page: null }));
  assert.deepEqual((info as { stale: unknown }).stale, [{ conversationId: 1, ranges: [{ from: 1, to: 3 }] }]);
  assert.deepEqual((info as { newHoles: unknown }).newHoles, [{ conversationId: 1, hole: { from: 4, to: 6 } }]);
  assert.deepEqual(inbox.toRead(1), [{ from: 1, to: 6 }]);

  const m = (seq: number, version?: number) => ({ ...entry(seq, 1, seq).message!, version });
  const got = await inbox.fillPage(1, [m(2, 3), m(3, 1), m(4), m(5), m(6)], 2, 6);
  assert.deepEqual(got.messages.map((x) => x.seq), [4, 5, 6]);
  assert.deepEqual(got.updates.map((x) => x.seq), [2]);
  assert.deepEqual(history, [4, 5, 6]);
  assert.deepEqual(updates, [2]);
  assert.deepEqual(inbox.toRead(1), [{ from: 1, to: 1 }]);
  assert.deepEqual(store.snapshot()!.conversations["1"].stale, [{ from: 1, to: 1 }]);
  assert.deepEqual(store.snapshot()!.conversations["1"].versions, { "2": 3 });
});

test("inbox: a blocked sender's entry is kept from onEntry by default, the cursor moving past it; shown with showBlocked", async () => {
  const blocked = (seq: number): Entry => {
    const e = entry(seq);
    return { ...e, message: { ...e.message!, body: "", sender_blocked: true } };
  };
  for (const show of [false, true]) {
    const store = new MemoryStore();
    const state = emptyState();
    const got: string[] = [];
    const inbox = new Inbox(state, new Saver(store, state), {
      onEntry: (e) => { got.push(`${e.inbox_seq}${e.message?.sender_blocked ? " blocked" : ""}`); },
    }, 1, show);
    assert.equal(await inbox.apply([entry(1), blocked(2), entry(3)]), "ok");
    assert.deepEqual(got, show ? ["1", "2 blocked", "3"] : ["1", "3"]);
    assert.equal(inbox.cursor, 3);
    assert.equal(store.snapshot()?.cursor, 3);
  }
});
