// The app's calls of the Client against a real inboxd dev: the list,
// members, changes of a message with their update entries, read positions
// with receipts, typing and presence between two clients, settings.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import WebSocket from "ws";
import { ApiError, Client, devToken, type Entry, type Presence, type ReceiptEvent, type TypingEvent, type WebSocketCtor } from "../../src/index.js";
import { startDev, type Dev } from "./dev.js";

let dev: Dev;

before(async () => { dev = await startDev(); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

interface Seen { entries: Entry[]; receipts: ReceiptEvent[]; typing: TypingEvent[]; presence: Presence[]; connected: boolean }

async function client(user: number): Promise<{ c: Client; seen: Seen; run: Promise<void> }> {
  const seen: Seen = { entries: [], receipts: [], typing: [], presence: [], connected: false };
  const c = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, user), WebSocket: WebSocket as unknown as WebSocketCtor, startupJitterMs: -1,
    handlers: {
      onEntry: (e) => { seen.entries.push(e); },
      onReceipt: (r) => { seen.receipts.push(r); },
      onTyping: (t) => { seen.typing.push(t); },
      onPresence: (p) => { seen.presence.push(p); },
      onStatus: (s) => { seen.connected = s.state === "connected" && s.transport === "websocket"; },
    },
  });
  return { c, seen, run: c.start() };
}

test("the app's calls: list, members, changes, reports, receipts, typing, presence, settings", { timeout: 120_000 }, async () => {
  const a = await client(11);
  const b = await client(12);
  try {
    await waitFor(() => a.seen.connected && b.seen.connected, 30_000, "both welcomed");
    const cid = await a.c.createConversation("app", [12]);
    assert.deepEqual((await a.c.members(cid)).map((m) => m.user_id).sort(), [11, 12]);
    // Roles: the creator owns it; it makes b a moderator; b may not set roles.
    assert.deepEqual((await a.c.members(cid)).map((m) => [m.user_id, m.role]).sort(), [[11, "owner"], [12, "member"]]);
    await a.c.setRole(cid, 12, "moderator");
    assert.deepEqual((await b.c.members(cid)).find((m) => m.user_id === 12)!.role, "moderator");
    await assert.rejects(b.c.setRole(cid, 11, "member"), (err: unknown) => err instanceof ApiError && err.status === 403);
    // The moderator bans a user in advance and lists it; the owner lifts it.
    await b.c.ban(cid, 99, new Date(Date.now() + 3600_000));
    assert.deepEqual((await b.c.bans(cid)).map((s) => [s.user_id, s.by, typeof s.until]), [[99, 12, "string"]]);
    await assert.rejects(b.c.mute(cid, 11), (err: unknown) => err instanceof ApiError && err.status === 403);
    await a.c.unban(cid, 99);
    assert.deepEqual(await a.c.bans(cid), []);
    assert.deepEqual(await b.c.mutes(cid), []);
    await waitFor(() => b.seen.entries.some((e) => e.conversation_id === cid && e.kind === "message"), 30_000, "b sees the conversation");
    const list = await b.c.conversations();
    assert.equal(list.filter((r) => r.conversation_id === cid).length, 1);
    assert.equal(list.find((r) => r.conversation_id === cid)!.title, "app");
    assert.equal(list.find((r) => r.conversation_id === cid)!.role, "moderator");

    // Settings: the moderator sets the slow mode, may not freeze; the owner
    // renames and freezes, then lifts both (both are exempt from the slow mode).
    await b.c.updateConversation(cid, { slow_mode: 5 });
    await assert.rejects(b.c.updateConversation(cid, { frozen: true }), (err: unknown) => err instanceof ApiError && err.status === 403);
    await a.c.updateConversation(cid, { title: "app 2", frozen: true });
    const updated = (await b.c.conversations()).find((r) => r.conversation_id === cid)!;
    assert.deepEqual([updated.title, updated.frozen, updated.slow_mode], ["app 2", true, 5]);
    await a.c.updateConversation(cid, { frozen: false, slow_mode: 0 });

    // A message, then its changes: each answers the message after it, and b gets update entries.
    const id = await a.c.send(cid, "hello");
    const sent = await a.c.waitSent(id);
    const seq = sent!.message!.seq;
    await waitFor(() => b.seen.entries.some((e) => e.kind === "message" && e.message?.seq === seq && e.conversation_id === cid), 30_000, "b gets it");
    assert.equal((await b.c.conversations()).find((r) => r.conversation_id === cid)!.unread_count, 1);
    const newest = await b.c.history(cid, 0, 10); // 0: the newest page
    assert.deepEqual(newest.messages.map((m) => m.seq).slice(-1), [seq]);
    assert.deepEqual((await b.c.history(cid, seq, 10)).messages.map((m) => m.seq), newest.messages.map((m) => m.seq).filter((s) => s < seq));
    const edited = await a.c.edit(cid, seq, "hello!");
    assert.equal(edited.pending, false);
    assert.equal(edited.message!.version, 2);
    const reacted = await b.c.react(cid, seq, "👍");
    assert.deepEqual(reacted.message!.reactions, [{ emoji: "👍", count: 1, me: true }]);
    const again = await b.c.applyChange({ ...reacted.change }); // the same change_id: applied once
    assert.equal(again.message!.version, reacted.message!.version);
    await waitFor(() => b.seen.entries.some((e) => e.kind === "update" && e.message?.seq === seq && e.message.version === 3), 30_000, "b's update entries");
    await assert.rejects(b.c.edit(cid, seq, "not mine"), (err: unknown) => err instanceof ApiError && err.status === 403);

    // b reports a's message; the same report id answers the same report; one's own is refused.
    const rep = await b.c.report(cid, seq, { reason: "spam", note: "ads" });
    assert.equal(rep.pending, false);
    assert.equal(rep.report!.reason, "spam");
    assert.equal(rep.report!.seq, seq);
    const rep2 = await b.c.report(cid, seq, { reason: "spam", note: "ads", reportId: rep.reportId });
    assert.deepEqual(rep2.report, rep.report);
    await assert.rejects(a.c.report(cid, seq, { reason: "spam" }), (err: unknown) => err instanceof ApiError && err.status === 400);

    // A read moves b's position; a gets the receipt frame and the list.
    await b.c.markRead(cid, seq);
    await waitFor(() => a.seen.receipts.some((r) => r.conversation_id === cid && r.user_id === 12 && r.read_seq === seq), 30_000, "a's receipt");
    assert.ok((await a.c.receipts(cid)).some((r) => r.user_id === 12 && r.read_seq === seq));
    await waitFor(() => b.seen.entries.some((e) => e.kind === "record" && e.record?.conversation_id === cid && e.record.read_seq === seq), 30_000, "b's record entry");
    assert.equal((await b.c.conversations()).find((r) => r.conversation_id === cid)!.unread_count, 0);

    // Typing goes over the socket, to the other member only.
    await waitFor(() => { a.c.sendTyping(cid); return b.seen.typing.some((t) => t.conversation_id === cid && t.user_id === 11 && !t.stop); }, 30_000, "b sees a typing");
    assert.ok(a.c.sendTyping(cid, true));
    await waitFor(() => b.seen.typing.some((t) => t.user_id === 11 && t.stop), 30_000, "b sees a stop");
    assert.equal(a.seen.typing.length, 0, "the typer gets no frame of its own");

    // Presence: b is online to a; hiding it is seen live.
    assert.deepEqual((await a.c.presence([12])).map((p) => [p.user_id, p.online]), [[12, true]]);
    const s = await b.c.setSettings({ hide_presence: true });
    assert.equal(s.hide_presence, true);
    assert.equal((await b.c.settings()).hide_presence, true);
    await waitFor(() => a.seen.presence.some((p) => p.user_id === 12 && !p.online), 30_000, "a sees b offline");

    await a.c.setRecord(cid, { pinned: true });
    assert.equal((await a.c.conversations()).find((r) => r.conversation_id === cid)!.pinned, true);
    const deleted = await a.c.delete(cid, seq);
    assert.equal(deleted.message!.deleted, true);
    assert.equal(a.c.sendTyping(0), false);
  } finally {
    await Promise.all([a.c.stop(), b.c.stop()]);
    await Promise.all([a.run, b.run]);
  }
});
