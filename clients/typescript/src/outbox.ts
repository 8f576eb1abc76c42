// The offline outbox: a send is saved with its msg_id before any attempt,
// and posted again with the same msg_id until it has a seq or a permanent
// refusal, across restarts (the msg_id is the gateway's idempotency key).
import type { Api } from "./api.js";
import { Backoff, jitterUp, sleep } from "./backoff.js";
import { ApiError, PermanentError } from "./errors.js";
import type { Message, ServerFrame } from "./protocol.js";
import type { Saver } from "./inbox.js";
import type { OutboxItem, State } from "./store.js";

/** SendOptions are a send's optional fields; absent: none. */
export interface SendOptions {
  /** replyTo: the seq of the message (in the same conversation) this one answers. */
  replyTo?: number;
  /** mentions: the user ids the message mentions. */
  mentions?: number[];
  /** mentionAll: the message mentions every member. */
  mentionAll?: boolean;
  /** attachments: ids of uploads (Client.upload) to attach; with any, the body may be empty. */
  attachments?: string[];
}

/** SendResult is how a queued send ended: its message (with seq), or the permanent refusal. */
export interface SendResult {
  msgId: string;
  conversationId: number;
  message?: Message;
  error?: ApiError;
}

/** @internal */
export interface OutboxConfig {
  backoffInitialMs: number;
  backoffMaxMs: number;
  pendingRecheckMs: number; // after 202 pending, post the same msg_id again after this (doubling to backoffMaxMs)
  newId?: () => string;
  onResult?: (r: SendResult) => void;
  sendTimeoutMs?: number; // wait for a send_ack before the send is retried (default 10000)
}

/**
 * WsChannel is a welcomed WebSocket session the outbox sends over (docs/client.md "Sends: the outbox").
 *
 * @internal
 */
export interface WsChannel {
  send(frame: object): void;
}

const maxBody = 4096;

/**
 * Outbox keeps the queued sends in the state. Order: the oldest send whose
 * outcome is unknown holds back the later ones, so one conversation's
 * messages keep the order of the send calls; a pending (202) send no longer
 * holds back the others.
 *
 * @internal
 */
export class Outbox {
  private readonly waiters = new Map<string, ((r: SendResult) => void)[]>();
  private readonly recheckAt = new Map<string, { at: number; delay: number }>();
  private wake: () => void = () => undefined;
  private readonly backoff: Backoff;
  private channel?: WsChannel;
  // The send waiting for its send_ack or error frame (one at a time: the oldest holds back the others).
  private answer?: { msgId: string; resolve: (f: ServerFrame | undefined) => void };

  constructor(private readonly state: State, private readonly saver: Saver, private readonly api: Api,
    private readonly cfg: OutboxConfig) {
    this.backoff = new Backoff({ initialMs: cfg.backoffInitialMs, maxMs: cfg.backoffMaxMs });
  }

  get items(): readonly OutboxItem[] {
    return this.state.outbox;
  }

  /** enqueue validates, assigns the msg_id, saves, and returns the msg_id; it works offline. */
  async enqueue(conversationId: number, body: string, opts: SendOptions = {}): Promise<string> {
    if (body === "" && !opts.attachments?.length) throw new Error("inboxd: empty message body");
    if (new TextEncoder().encode(body).length > maxBody) throw new Error("inboxd: message body over 4096 bytes");
    const msgId = (this.cfg.newId ?? (() => crypto.randomUUID()))();
    const item: OutboxItem = { msgId, conversationId, body, queuedAt: Date.now() };
    if (opts.replyTo) item.replyTo = opts.replyTo;
    if (opts.mentions?.length) item.mentions = [...opts.mentions];
    if (opts.mentionAll) item.mentionAll = true;
    if (opts.attachments?.length) item.attachments = [...opts.attachments];
    this.state.outbox.push(item);
    await this.saver.save();
    this.wake();
    return msgId;
  }

  /** waitSent resolves when the send ended (seq or refusal); undefined if the msg_id is not queued. */
  waitSent(msgId: string): Promise<SendResult | undefined> {
    if (!this.state.outbox.some((i) => i.msgId === msgId)) return Promise.resolve(undefined);
    return new Promise((resolve) => {
      const list = this.waiters.get(msgId) ?? [];
      list.push(resolve);
      this.waiters.set(msgId, list);
    });
  }

  /** seen is told of every message entry: a pending send whose message reached the inbox is done. */
  async seen(m: Message): Promise<void> {
    const item = this.state.outbox.find((i) => i.msgId === m.msg_id);
    if (item) await this.finish(item, { msgId: item.msgId, conversationId: item.conversationId, message: m });
  }

  /** setChannel: a WebSocket session was welcomed (sends go over it) or ended (undefined: over HTTP). */
  setChannel(ch: WsChannel | undefined): void {
    this.channel = ch;
    if (!ch) this.answer?.resolve(undefined);
    this.wake();
  }

  /** frame is told of a send_ack or an error frame carrying a msg_id. */
  frame(f: ServerFrame): void {
    if (this.answer && f.msg_id === this.answer.msgId) this.answer.resolve(f);
  }

  /**
   * attemptWs sends over the WebSocket and waits for the answer: send_ack ends
   * the send; `unavailable` (the gateway's pending) is retried after its
   * retry_after_ms; a timeout or the session's end is retried; another error
   * is left to HTTP, whose status says whether it is final (false).
   */
  private async attemptWs(ch: WsChannel, item: OutboxItem, signal: AbortSignal): Promise<boolean> {
    const got = new Promise<ServerFrame | undefined>((resolve) => {
      const done = (f: ServerFrame | undefined) => {
        clearTimeout(t);
        signal.removeEventListener("abort", onAbort);
        resolve(f);
      };
      const onAbort = () => done(undefined);
      const t = setTimeout(onAbort, this.cfg.sendTimeoutMs ?? 10000);
      this.answer = { msgId: item.msgId, resolve: done };
      signal.addEventListener("abort", onAbort, { once: true });
    });
    ch.send({ type: "send", msg_id: item.msgId, conversation_id: item.conversationId, body: item.body,
      reply_to: item.replyTo, mentions: item.mentions, mention_all: item.mentionAll, attachments: item.attachments });
    const f = await got;
    this.answer = undefined;
    if (signal.aborted) return true;
    if (f?.type === "send_ack" && typeof f.seq === "number") {
      this.backoff.reset();
      const message = { conversation_id: f.conversation_id ?? item.conversationId, seq: f.seq, msg_id: item.msgId, body: item.body } as Message;
      if (f.attachments?.length) message.attachments = f.attachments;
      await this.finish(item, { msgId: item.msgId, conversationId: item.conversationId, message });
      return true;
    }
    const ra = (f as { retry_after_ms?: number } | undefined)?.retry_after_ms;
    if (f?.type === "error" && f.code === "unavailable" && ra !== undefined) {
      await sleep(jitterUp(ra, 0.2), signal);
      return true;
    }
    if (f === undefined) {
      await sleep(this.backoff.next(), signal);
      return true;
    }
    return false;
  }

  /** run posts the queued sends until signal aborts; it rejects with a PermanentError on a 401. */
  async run(signal: AbortSignal): Promise<void> {
    while (!signal.aborted) {
      const { item, waitMs } = this.nextDue();
      if (!item) {
        await this.idle(waitMs, signal);
        continue;
      }
      await this.attempt(item, signal);
    }
  }

  private nextDue(): { item?: OutboxItem; waitMs: number } {
    const now = Date.now();
    let waitMs = 60_000;
    for (const item of this.state.outbox) {
      if (!item.pending) return { item, waitMs: 0 };
      const r = this.recheckAt.get(item.msgId);
      if (!r || r.at <= now) return { item, waitMs: 0 };
      waitMs = Math.min(waitMs, r.at - now);
    }
    return { waitMs };
  }

  private idle(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      let t: ReturnType<typeof setTimeout> | undefined = undefined;
      const done = () => {
        clearTimeout(t);
        signal.removeEventListener("abort", done);
        this.wake = () => undefined;
        resolve();
      };
      t = setTimeout(done, ms);
      this.wake = done;
      signal.addEventListener("abort", done, { once: true });
    });
  }

  private async attempt(item: OutboxItem, signal: AbortSignal): Promise<void> {
    if (this.channel && (await this.attemptWs(this.channel, item, signal))) return;
    const req = { msg_id: item.msgId, body: item.body, reply_to: item.replyTo, mentions: item.mentions, mention_all: item.mentionAll,
      attachments: item.attachments };
    try {
      const out = await this.api.send(item.conversationId, req, signal);
      this.backoff.reset();
      if ("message" in out) {
        await this.finish(item, { msgId: item.msgId, conversationId: item.conversationId, message: out.message });
      } else {
        await this.markPending(item);
      }
    } catch (err) {
      if (signal.aborted) return;
      if (err instanceof ApiError && err.status === 401) {
        throw new PermanentError(401, undefined, err.code, "send: the token was refused");
      }
      if (err instanceof ApiError && !err.retryable) {
        await this.finish(item, { msgId: item.msgId, conversationId: item.conversationId, error: err });
        return;
      }
      const wait = err instanceof ApiError && err.retryAfterMs !== undefined ? jitterUp(err.retryAfterMs, 0.2) : this.backoff.next();
      await sleep(wait, signal);
    }
  }

  private async markPending(item: OutboxItem): Promise<void> {
    const prev = this.recheckAt.get(item.msgId);
    const delay = prev ? Math.min(prev.delay * 2, this.cfg.backoffMaxMs) : this.cfg.pendingRecheckMs;
    this.recheckAt.set(item.msgId, { at: Date.now() + delay, delay });
    if (!item.pending) {
      item.pending = true;
      await this.saver.save();
    }
  }

  private async finish(item: OutboxItem, r: SendResult): Promise<void> {
    const i = this.state.outbox.indexOf(item);
    if (i < 0) return;
    this.state.outbox.splice(i, 1);
    this.recheckAt.delete(item.msgId);
    await this.saver.save();
    this.cfg.onResult?.(r);
    for (const w of this.waiters.get(item.msgId) ?? []) w(r);
    this.waiters.delete(item.msgId);
    this.wake();
  }
}
