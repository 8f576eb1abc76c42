// Inbox is the delivery core: entries in, handlers called in inbox order,
// each once, the cursor moved and saved only after the handler resolved. It
// knows nothing of transports: the WebSocket and the long-poll both feed it.
import { ApiError, HandlerError, StoreError } from "./errors.js";
import type { Counts, Entry, History, LargeHead, Message, Record, ServerFrame, TooLongAnswer } from "./protocol.js";
import { KindMessage, KindUpdate } from "./protocol.js";
import { cloneState, type ConversationState, type Hole, type State, type Store } from "./store.js";

/** TooLong is what OnTooLong learns: the jump to head and, per conversation, the history it now lacks. */
export interface TooLong {
  epoch: number;
  head: number;
  previousEpoch: number;
  previousCursor: number;
  newHoles: { conversationId: number; hole: Hole }[];
  /** stale: per conversation, the messages delivered before the jump; backfill reads them again for changes (onUpdate). */
  stale: { conversationId: number; ranges: Hole[] }[];
}

/** Handlers are the app's callbacks. The delivery ones (onEntry, onTooLong, onConversations, onHistory) never run concurrently. */
export interface Handlers {
  /** onEntry gets each entry once in inbox_seq order; a rejection stops the client and the entry comes again on the next start. */
  onEntry?(e: Entry): void | Promise<void>;
  /** onTooLong: the inbox jumped to the head; older history is in holes (load it with backfill). The jump is saved after it resolved. */
  onTooLong?(t: TooLong): void | Promise<void>;
  /** onConversations: the whole conversation list, after a too-long. */
  onConversations?(records: Record[]): void | Promise<void>;
  /** onHistory: what a backfill filled in, ascending; the hole is marked filled after it resolved. */
  onHistory?(conversationId: number, messages: Message[]): void | Promise<void>;
  /**
   * onUpdate: a message's new state (edited, deleted, reactions) from an
   * update entry, right after onEntry; only a version higher than any the app
   * was handed for that message (a message entry read after the change
   * already carried it). Same cursor rule as onEntry.
   */
  onUpdate?(m: Message): void | Promise<void>;
  /** onCounts: the server's unread and mention totals changed. */
  onCounts?(c: Counts): void;
}

/**
 * Mutex serializes the delivery handlers and the state changes that go with them.
 *
 * @internal
 */
export class Mutex {
  private tail: Promise<void> = Promise.resolve();
  private held = false;

  get locked(): boolean {
    return this.held;
  }

  run<T>(fn: () => Promise<T>): Promise<T> {
    const result = this.tail.then(async () => {
      this.held = true;
      try {
        return await fn();
      } finally {
        this.held = false;
      }
    });
    this.tail = result.then(() => undefined, () => undefined);
    return result;
  }
}

/**
 * Saver writes the state through the store one save at a time, each the state as it is then.
 *
 * @internal
 */
export class Saver {
  private chain: Promise<void> = Promise.resolve();

  constructor(private readonly store: Store, private readonly state: State) {}

  save(): Promise<void> {
    const next = this.chain.then(() => this.store.save(cloneState(this.state)));
    this.chain = next.catch(() => undefined);
    return next.catch((err) => {
      throw new StoreError("save", err);
    });
  }
}

/** @internal */
export type ApplyResult = "ok" | "gap";

/**
 * LargeReader reads the history of read-mode conversations (the client gives its Api's).
 *
 * @internal
 */
export interface LargeReader {
  /** after: GET …/messages?after=&limit= (ascending; has_more: newer ones exist). */
  after(cid: number, after: number, limit: number): Promise<History>;
  /** changed: GET …/messages?changed_after=&limit= (change order). */
  changed(cid: number, changedAfter: number, limit: number): Promise<History>;
  page: number;
}

/**
 * Inbox applies pages of entries and too-long answers to the state.
 *
 * @internal
 */
export class Inbox {
  readonly lock = new Mutex();
  private counts: Counts = { unread_total: 0, mention_total: 0 };
  /** ownMessage is told of every message entry (the outbox matches pending sends by msg_id). */
  ownMessage: (m: Message) => void = () => undefined;
  /** largeReader reads read-mode conversations; without one they are treated as any other (holes). */
  largeReader?: LargeReader;

  constructor(
    readonly state: State,
    private readonly saver: Saver,
    private readonly handlers: Handlers,
    private readonly commitEvery = 1,
    private readonly showBlocked = false,
  ) {}

  /** hidden says whether m is kept from the handlers: a blocked sender's message, unless showBlocked. */
  hidden(m: Message | undefined): boolean {
    return m?.sender_blocked === true && !this.showBlocked;
  }

  get cursor(): number {
    return this.state.cursor;
  }

  get epoch(): number {
    return this.state.epoch;
  }

  /** adoptEpoch takes the server's epoch when the client has none yet (a first sync). */
  async adoptEpoch(epoch: number): Promise<void> {
    if (this.state.epoch === 0 && epoch > 0 && this.state.cursor === 0) {
      this.state.epoch = epoch;
      await this.saver.save();
    }
  }

  setCounts(c: Partial<Counts>): void {
    if (c.unread_total === undefined || c.mention_total === undefined) return;
    if (c.unread_total === this.counts.unread_total && c.mention_total === this.counts.mention_total) return;
    this.counts = { unread_total: c.unread_total, mention_total: c.mention_total };
    this.handlers.onCounts?.({ ...this.counts });
  }

  getCounts(): Counts {
    return { ...this.counts };
  }

  /**
   * apply delivers the entries that continue the cursor. Entries at or below
   * the cursor are dropped (duplicates, overlapping pulls); an entry beyond
   * cursor+1 is a gap: apply stops there and answers "gap" so the caller
   * pulls the missing entries over HTTP.
   */
  apply(entries: Entry[]): Promise<ApplyResult> {
    return this.lock.run(() => this.applyLocked(entries));
  }

  private async applyLocked(entries: Entry[]): Promise<ApplyResult> {
    const sorted = [...entries].sort((a, b) => a.inbox_seq - b.inbox_seq);
    let unsaved = 0;
    try {
      for (const e of sorted) {
        if (e.inbox_seq <= this.state.cursor) continue;
        if (e.inbox_seq !== this.state.cursor + 1) return "gap";
        await this.deliver(e);
        this.state.cursor = e.inbox_seq;
        if (++unsaved >= this.commitEvery) {
          unsaved = 0;
          await this.saver.save();
        }
      }
      return "ok";
    } finally {
      if (unsaved > 0) await this.saver.save();
    }
  }

  /** deliver calls onEntry, then changes the state: a failing handler leaves it as it was, so the entry comes again. */
  private async deliver(e: Entry): Promise<void> {
    // An entry of a read-mode conversation (a mention, an armed member's) may jump past the last seq
    // delivered: the messages between are read and delivered first, so seq order holds without a hole.
    if (e.kind === KindMessage && e.message) await this.gapBefore(e.conversation_id, e.message.seq);
    const skip = e.kind === KindMessage && e.message ? this.deliveredByBackfill(e.message) : false;
    if (!skip && !this.hidden(e.message)) await callHandler("onEntry", () => this.handlers.onEntry?.(e));
    const m = e.message;
    if (e.kind === KindUpdate && m && (m.version ?? 0) > this.version(m) && !this.hidden(m)) {
      await callHandler("onUpdate", () => this.handlers.onUpdate?.(m));
    }
    if ((e.kind === KindMessage || e.kind === KindUpdate) && m) this.noteVersion(m);
    if (e.kind === KindMessage && e.message) this.noteMessage(e.message);
    if (e.record) this.noteRecord(e.record);
    if (e.message) this.ownMessage(e.message);
  }

  /** deliveredByBackfill: a message at or below the last seq known and in no hole was handed over by Backfill. */
  private deliveredByBackfill(m: Message): boolean {
    const c = this.conv(m.conversation_id);
    return m.seq <= c.lastSeq && !inHoles(c.holes, m.seq);
  }

  /** noteMessage records the message's seq: a hole for the seqs it skipped, or punched out of a hole. */
  private noteMessage(m: Message): void {
    const c = this.conv(m.conversation_id);
    if (m.seq > c.lastSeq) {
      if (m.seq > c.lastSeq + 1) addHole(c, { from: c.lastSeq + 1, to: m.seq - 1 });
      c.lastSeq = m.seq;
    } else if (inHoles(c.holes, m.seq)) {
      c.holes = punch(c.holes, m.seq, m.seq);
    }
  }

  /** version: the highest version of the message handed to the app (1 when none was recorded). */
  private version(m: Message): number {
    return this.conv(m.conversation_id).versions?.[String(m.seq)] ?? 1;
  }

  private noteVersion(m: Message): void {
    const v = m.version ?? 0;
    if (v <= this.version(m)) return;
    const c = this.conv(m.conversation_id);
    (c.versions ??= {})[String(m.seq)] = v;
  }

  private noteRecord(r: Record): void {
    const c = this.conv(r.conversation_id);
    c.recordVersion = Math.max(c.recordVersion, r.version);
    this.state.recordVersion = Math.max(this.state.recordVersion, r.version);
  }

  conv(cid: number): ConversationState {
    const key = String(cid);
    return (this.state.conversations[key] ??= { lastSeq: 0, recordVersion: 0, holes: [] });
  }

  /**
   * tooLong handles a too-long answer: reads the rest of the list, records a
   * hole per conversation from the last seq known to its last_seq, calls
   * onTooLong, saves the jump to the head, then hands the list over.
   */
  tooLong(t: TooLongAnswer, nextPage: (page: string) => Promise<{ conversations: Record[]; next_page: string | null }>): Promise<void> {
    return this.lock.run(async () => {
      const records = [...t.conversations];
      for (let page = t.next_page; page; ) {
        const l = await nextPage(page);
        records.push(...l.conversations);
        page = l.next_page;
      }
      const info: TooLong = { epoch: t.epoch, head: t.head, previousEpoch: this.state.epoch, previousCursor: this.state.cursor, newHoles: [], stale: [] };
      for (const r of records) {
        const c = this.conv(r.conversation_id);
        if (c.lastSeq > 0) {
          // What was delivered may have changed in the skipped range: read it again later.
          const stale: ConversationState = { lastSeq: 0, recordVersion: 0, holes: [...(c.stale ?? [])] };
          addHole(stale, { from: 1, to: c.lastSeq });
          for (const h of c.holes) stale.holes = punch(stale.holes, h.from, h.to);
          if (stale.holes.length > 0) {
            c.stale = stale.holes;
            info.stale.push({ conversationId: r.conversation_id, ranges: stale.holes.map((h) => ({ ...h })) });
          }
        }
        if (r.last_seq > c.lastSeq) {
          const hole = { from: c.lastSeq + 1, to: r.last_seq };
          addHole(c, hole);
          info.newHoles.push({ conversationId: r.conversation_id, hole });
          c.lastSeq = r.last_seq;
        }
        c.recordVersion = Math.max(c.recordVersion, r.version);
      }
      await callHandler("onTooLong", () => this.handlers.onTooLong?.(info));
      this.state.epoch = t.epoch;
      this.state.cursor = t.head;
      this.state.recordVersion = Math.max(this.state.recordVersion, t.record_version ?? 0);
      await this.saver.save();
      await callHandler("onConversations", () => this.handlers.onConversations?.(records));
    });
  }

  // Read mode (docs/large-conversations.md): the server lists the user's
  // read-mode conversations with their last seq and change count; the client
  // reads what it lacks with ?after= and ?changed_after= and hands the
  // messages to onEntry as message entries with inbox_seq 0, in seq order,
  // each once, and the changes to onUpdate. All under the delivery lock; the
  // inbox cursor does not move.

  /** noteLarge takes the whole list of read-mode conversations: those in it are read-mode, the others no longer. */
  noteLarge(list: LargeHead[]): Promise<void> {
    return this.lock.run(() => this.noteLargeLocked(list));
  }

  private async noteLargeLocked(list: LargeHead[]): Promise<void> {
    const ids = new Set(list.map((h) => h.conversation_id));
    let changed = false;
    for (const h of list) {
      const c = this.conv(h.conversation_id);
      if (!c.large) {
        c.large = true;
        changed = true;
      }
    }
    for (const [cid, c] of Object.entries(this.state.conversations)) {
      if (c.large && !ids.has(Number(cid))) {
        delete c.large;
        changed = true;
      }
    }
    if (changed) await this.saver.save();
  }

  /** catchUpLarge reads, per head, the messages beyond the last seq delivered and the changes beyond the change count applied. */
  catchUpLarge(list: LargeHead[]): Promise<void> {
    return this.lock.run(async () => {
      for (const h of list) await this.catchUpHead(h);
    });
  }

  /** largeAnswer is noteLarge then catchUpLarge: the list of a welcome, a too_long or a large frame. */
  largeAnswer(list: LargeHead[]): Promise<void> {
    return this.lock.run(async () => {
      await this.noteLargeLocked(list);
      for (const h of list) await this.catchUpHead(h);
    });
  }

  /** changeCount: the change count applied of a conversation. */
  changeCount(cid: number): number {
    return this.state.conversations[String(cid)]?.changeCount ?? 0;
  }

  private async catchUpHead(h: LargeHead): Promise<void> {
    const cid = h.conversation_id;
    const c = this.conv(cid);
    try {
      if (h.last_seq > c.lastSeq) await this.readNew(cid, h.last_seq, false);
      if (h.change_count > (c.changeCount ?? 0)) await this.readChanges(cid, h.change_count);
    } catch (err) {
      await this.largeReadFailed(cid, err);
    }
  }

  /** largeReadFailed: a conversation the user can no longer read (403, 404) is no longer followed; other errors are the session's. */
  private async largeReadFailed(cid: number, err: unknown): Promise<void> {
    if (err instanceof ApiError && (err.status === 403 || err.status === 404)) {
      delete this.conv(cid).large;
      await this.saver.save();
      return;
    }
    throw err;
  }

  /**
   * readNew reads ?after=<last seq delivered> pages and delivers them until
   * target is reached and the server has no more; bounded stops at target
   * (the gap before an entry or a frame's message). Once read, the last seq
   * is at least target (seqs not returned are not visible to the user).
   */
  private async readNew(cid: number, target: number, bounded: boolean): Promise<void> {
    const r = this.largeReader;
    if (!r) return;
    for (;;) {
      const c = this.conv(cid);
      const last = c.lastSeq;
      if (bounded && last >= target) return;
      const limit = bounded ? Math.min(r.page, target - last) : r.page;
      const page = await r.after(cid, last, limit);
      const msgs = [...(page.messages ?? [])].sort((a, b) => a.seq - b.seq);
      let progress = false;
      for (const m of msgs) {
        if (m.seq <= last || (bounded && m.seq > target)) continue;
        await this.deliverLarge({ ...m, conversation_id: cid });
        progress = true;
      }
      const done = !page.has_more || !progress || (bounded && c.lastSeq >= target);
      if (done && c.lastSeq < target) c.lastSeq = target;
      await this.saver.save();
      if (done) return;
    }
  }

  /** readChanges reads ?changed_after=<change count applied> pages, hands newer versions to onUpdate, moves the count to target. */
  private async readChanges(cid: number, target: number): Promise<void> {
    const r = this.largeReader;
    if (!r) return;
    for (;;) {
      const c = this.conv(cid);
      const applied = c.changeCount ?? 0;
      const page = await r.changed(cid, applied, r.page);
      let ord = applied;
      for (const m of page.messages ?? []) {
        await this.updateLarge({ ...m, conversation_id: cid });
        ord = Math.max(ord, m.changed_ord ?? 0);
      }
      const done = !page.has_more || ord <= applied;
      if (done) ord = Math.max(ord, target);
      c.changeCount = Math.max(applied, ord);
      await this.saver.save();
      if (done) return;
    }
  }

  /** deliverLarge hands a read-mode message to onEntry (inbox_seq 0) unless the app has it, and records it. */
  private async deliverLarge(m: Message): Promise<void> {
    if (this.deliveredByBackfill(m)) return this.updateLarge(m);
    const e: Entry = { inbox_seq: 0, conversation_id: m.conversation_id, kind: KindMessage, message: m };
    if (!this.hidden(m)) await callHandler("onEntry", () => this.handlers.onEntry?.(e));
    this.noteVersion(m);
    this.noteMessage(m);
    this.ownMessage(m);
  }

  /** updateLarge hands a changed message to onUpdate when the app has it in an older version. */
  private async updateLarge(m: Message): Promise<void> {
    const c = this.conv(m.conversation_id);
    if (m.seq > c.lastSeq || inHoles(c.holes, m.seq) || (m.version ?? 1) <= this.version(m)) return;
    if (!this.hidden(m)) await callHandler("onUpdate", () => this.handlers.onUpdate?.(m));
    this.noteVersion(m);
  }

  /**
   * gapBefore reads a conversation's messages between the last seq delivered
   * and seq. For one not (or no longer) known read-mode the gap is seqs the
   * user could not see (none returned) or a read-mode span the client did not
   * follow (a switch down before it read the tail, an up and down while it
   * was away): its changes are read too (read-mode changes write no update
   * entries). A conversation the client knows nothing of has no gap.
   */
  private async gapBefore(cid: number, seq: number): Promise<void> {
    const c = this.state.conversations[String(cid)];
    if (!c || !(c.large || c.lastSeq > 0) || seq <= c.lastSeq + 1) return;
    const large = !!c.large;
    try {
      await this.readNew(cid, seq - 1, true);
      if (!large) await this.readChanges(cid, 0);
    } catch (err) {
      await this.largeReadFailed(cid, err);
    }
  }

  /**
   * messages applies a messages frame: its messages continuing the last seq
   * (a gap before them read first, duplicates dropped), the rest up to its
   * last_seq, then its changes: trusted (the session saw the previous change
   * count and it is the one applied) hands the frame's changed list over,
   * otherwise they are read with ?changed_after=.
   */
  messages(f: ServerFrame, trusted: boolean): Promise<void> {
    return this.lock.run(async () => {
      const cid = f.conversation_id ?? 0;
      if (!cid) return;
      const c = this.conv(cid);
      c.large = true;
      try {
        for (const m of [...(f.messages ?? [])].sort((a, b) => a.seq - b.seq)) {
          await this.gapBefore(cid, m.seq);
          await this.deliverLarge({ ...m, conversation_id: cid });
        }
        if ((f.last_seq ?? 0) > c.lastSeq && c.large) await this.readNew(cid, f.last_seq ?? 0, false);
        const k = f.change_count ?? 0;
        if (trusted) {
          for (const m of f.changed ?? []) await this.updateLarge({ ...m, conversation_id: cid });
          c.changeCount = Math.max(c.changeCount ?? 0, k);
        } else if (k > (c.changeCount ?? 0)) {
          await this.readChanges(cid, k);
        }
      } catch (err) {
        await this.largeReadFailed(cid, err);
      }
      await this.saver.save();
    });
  }

  /** toRead: the conversation's holes and stale ranges, merged (what backfill still has to read). */
  toRead(cid: number): Hole[] {
    const c = this.conv(cid);
    const out: ConversationState = { lastSeq: 0, recordVersion: 0, holes: c.holes.map((h) => ({ ...h })) };
    for (const h of c.stale ?? []) addHole(out, h);
    return out.holes;
  }

  /**
   * fillPage hands a history page covering [from, to] over: the messages in
   * holes to onHistory, those in stale ranges with a version higher than the
   * app has to onUpdate; then [from, to] is read (holes and stale ranges
   * closed) and saved.
   */
  async fillPage(cid: number, messages: Message[], from: number, to: number): Promise<{ messages: Message[]; updates: Message[] }> {
    const c = this.conv(cid);
    const within = messages.filter((m) => m.seq >= from && m.seq <= to).sort((a, b) => a.seq - b.seq);
    const fresh = within.filter((m) => inHoles(c.holes, m.seq));
    const updates = within.filter((m) => !inHoles(c.holes, m.seq) && inHoles(c.stale ?? [], m.seq) && (m.version ?? 1) > this.version(m));
    const shown = fresh.filter((m) => !this.hidden(m));
    if (shown.length > 0) await callHandler("onHistory", () => this.handlers.onHistory?.(cid, shown));
    for (const m of updates) if (!this.hidden(m)) await callHandler("onUpdate", () => this.handlers.onUpdate?.(m));
    for (const m of [...fresh, ...updates]) this.noteVersion(m);
    c.holes = punch(c.holes, from, to);
    if (c.stale) c.stale = punch(c.stale, from, to);
    await this.saver.save();
    return { messages: shown, updates: updates.filter((m) => !this.hidden(m)) };
  }

  /** forget drops what is left to read of a conversation the user can no longer read (403, 404). */
  async forget(cid: number): Promise<void> {
    const c = this.conv(cid);
    c.holes = [];
    c.stale = [];
    await this.saver.save();
  }
}

async function callHandler(name: string, fn: () => unknown): Promise<void> {
  try {
    await fn();
  } catch (err) {
    throw new HandlerError(name, err);
  }
}

/** @internal */
export function inHoles(holes: Hole[], seq: number): boolean {
  return holes.some((h) => h.from <= seq && seq <= h.to);
}

/**
 * addHole merges h into the conversation's holes, kept ascending and disjoint.
 *
 * @internal
 */
export function addHole(c: ConversationState, h: Hole): void {
  if (h.from > h.to) return;
  const all = [...c.holes, h].sort((a, b) => a.from - b.from);
  const out: Hole[] = [];
  for (const x of all) {
    const last = out[out.length - 1];
    if (last && x.from <= last.to + 1) last.to = Math.max(last.to, x.to);
    else out.push({ ...x });
  }
  c.holes = out;
}

/**
 * punch removes [from, to] from the holes.
 *
 * @internal
 */
export function punch(holes: Hole[], from: number, to: number): Hole[] {
  const out: Hole[] = [];
  for (const h of holes) {
    if (h.to < from || h.from > to) {
      out.push(h);
      continue;
    }
    if (h.from < from) out.push({ from: h.from, to: from - 1 });
    if (h.to > to) out.push({ from: to + 1, to: h.to });
  }
  return out;
}
