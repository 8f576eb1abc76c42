// Read-mode conversations in the Inbox (docs/large-conversations.md): the
// conformance scenarios (clients/conformance/scenarios/large_*.json) cover
// the protocol; these cover the state and the paths they do not.
import { test } from "node:test";
import assert from "node:assert/strict";
import { Inbox, Saver, type LargeReader } from "../../src/inbox.js";
import { checkState, MemoryStore, emptyState, type State } from "../../src/store.js";
import { HandlerError } from "../../src/errors.js";
import type { Entry, History, Message } from "../../src/protocol.js";

function msg(seq: number, version?: number, ord?: number): Message {
  const m: Message = { conversation_id: 7, seq, msg_id: `m${seq}`, sender_id: 2, kind: "text", body: "x", created_at: "" };
  if (version) m.version = version;
  if (ord) m.changed_ord = ord;
  return m;
}

/** reader serves ?after= from seqs 1..last and ?changed_after= from changes, paged by limit, logging the queries. */
function reader(last: number, changes: Message[], page = 2): LargeReader & { queries: string[] } {
  const queries: string[] = [];
  return {
    queries, page,
    async after(_cid, after, limit): Promise<History> {
      queries.push(`after=${after}&limit=${limit}`);
      const messages: Message[] = [];
      for (let s = after + 1; s <= last; s++) {
        if (messages.length === limit) return { messages, has_more: true };
        messages.push(msg(s));
      }
      return { messages, has_more: false };
    },
    async changed(_cid, changedAfter, limit): Promise<History> {
      queries.push(`changed_after=${changedAfter}&limit=${limit}`);
      const messages = changes.filter((m) => (m.changed_ord ?? 0) > changedAfter);
      return { messages: messages.slice(0, limit), has_more: messages.length > limit };
    },
  };
}

function setup(state: State, r: LargeReader, onEntry: (e: Entry) => void, onUpdate?: (m: Message) => void) {
  const store = new MemoryStore(state);
  const inbox = new Inbox(state, new Saver(store, state), { onEntry, onUpdate });
  inbox.largeReader = r;
  return { store, inbox };
}

test("large: a state saved before read mode loads; the new fields survive a save", async () => {
  const old = checkState(JSON.parse(`{"version":1,"epoch":1,"cursor":3,"recordVersion":2,
    "conversations":{"7":{"lastSeq":4,"recordVersion":2,"holes":[]}},"outbox":[]}`));
  assert.equal(old.conversations["7"].large, undefined);
  assert.equal(old.conversations["7"].changeCount, undefined);
  const r = reader(4, []);
  const { inbox, store } = setup(old, r, () => undefined);
  assert.equal(inbox.changeCount(7), 0);
  await inbox.largeAnswer([{ conversation_id: 7, last_seq: 4, change_count: 0 }]);
  assert.deepEqual(r.queries, [], "nothing to read");
  const saved = checkState(JSON.parse(JSON.stringify(store.snapshot())));
  assert.equal(saved.conversations["7"].large, true);
  await inbox.largeAnswer([]);
  assert.equal(store.snapshot()?.conversations["7"].large, undefined, "no longer listed: no longer read-mode");
});

test("large: an untrusted messages frame reads the gap, then its changes with ?changed_after=; each once, saved", async () => {
  const state = emptyState();
  state.epoch = 1;
  state.conversations["7"] = { lastSeq: 2, recordVersion: 0, holes: [], large: true };
  const r = reader(5, [msg(1, 2, 1), msg(3, 2, 2), msg(1, 3, 3)]);
  const got: number[] = [];
  const updates: [number, number][] = [];
  const { inbox, store } = setup(state, r, (e) => {
    assert.equal(e.inbox_seq, 0);
    got.push(e.message!.seq);
  }, (m) => void updates.push([m.seq, m.version ?? 0]));
  const f = { type: "messages", conversation_id: 7, last_seq: 5, change_count: 3, messages: [msg(5), msg(2)], changed: [msg(1, 3, 3)] };
  await inbox.messages(f, false);
  assert.deepEqual(got, [3, 4, 5]);
  assert.deepEqual(updates, [[1, 2], [3, 2], [1, 3]]);
  assert.deepEqual(r.queries, ["after=2&limit=2", "changed_after=0&limit=2", "changed_after=2&limit=2"]);
  const cs = store.snapshot()!.conversations["7"];
  assert.equal(cs.lastSeq, 5);
  assert.equal(cs.changeCount, 3);
  assert.deepEqual(cs.holes, []);
  got.length = 0;
  updates.length = 0;
  await inbox.messages(f, true);
  assert.deepEqual(got, []);
  assert.deepEqual(updates, []);
});

test("large: the handler failing on a read-mode message stops there; what is saved stops before it", async () => {
  const state = emptyState();
  state.conversations["7"] = { lastSeq: 2, recordVersion: 0, holes: [], large: true };
  let failed = false;
  const got: number[] = [];
  const onEntry = (e: Entry) => {
    if (e.message!.seq === 5 && !failed) {
      failed = true;
      throw new Error("app refused");
    }
    got.push(e.message!.seq);
  };
  const { inbox, store } = setup(state, reader(6, []), onEntry);
  await assert.rejects(inbox.catchUpLarge([{ conversation_id: 7, last_seq: 6, change_count: 0 }]), HandlerError);
  const saved = store.snapshot()!;
  assert.equal(saved.conversations["7"].lastSeq, 4);
  const again = setup(saved, reader(6, []), onEntry);
  await again.inbox.catchUpLarge([{ conversation_id: 7, last_seq: 6, change_count: 0 }]);
  assert.deepEqual(got, [3, 4, 5, 6]);
  assert.equal(again.store.snapshot()!.conversations["7"].lastSeq, 6);
});
