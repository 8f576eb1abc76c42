// Client: the sync loop of one device of one user (docs/client.md is the
// contract, shared with the Go SDK). start() runs until stop() or a fatal
// error: a PermanentError, a handler's error, a store's error.
import { Api, type FetchLike, type SyncParams, type TokenSource } from "./api.js";
import { fromBase64Url, open, thumbnailKey } from "./attachments.js";
import { Backoff, CircuitBreaker, CrashPlan, jitterUp, sleep } from "./backoff.js";
import { ApiError, PermanentError, isFatal } from "./errors.js";
import { Inbox, Saver, type Handlers } from "./inbox.js";
import { Outbox, type SendOptions, type SendResult } from "./outbox.js";
import { emptyState, MemoryStore, type Hole, type Store } from "./store.js";
import { runWsSession, type WebSocketCtor, type WsEnd } from "./transport_ws.js";
import * as app from "./app.js";
import * as uploads from "./uploads.js";
import type { UploadFile } from "./uploads.js";
import type { Change, ChangeOptions, ChangeResult, ConversationSettings, Member, Presence, Receipt, ReceiptEvent, ReportOptions, ReportResult, Sanction, Settings, SettingsPatch, TypingEvent } from "./app.js";
import type { Attachment, Counts, History, Message, Reconnect, Record, ServerFrame, SyncAnswer, TooLongAnswer, Upload } from "./protocol.js";

// What upload takes, also from here (where it was before uploads.ts).
export { MultipartThreshold, type UploadFile } from "./uploads.js";

/** Transport is ClientConfig.transport: which transports the client uses. */
export type Transport = "auto" | "websocket" | "polling";

/** Status is for a UI: what the connection is doing now. */
export type Status =
  | { state: "connecting"; transport: "websocket" | "polling" }
  /** head: the server's inbox head when it let the client in (the welcome's, or the first poll answer's): what a catch-up reaches. */
  | { state: "connected"; transport: "websocket" | "polling"; head?: number }
  | { state: "waiting"; untilMs: number; reason: string }
  | { state: "circuit_open"; untilMs: number }
  | { state: "stopped"; error?: unknown };

/** ClientHandlers are the app's callbacks: the delivery ones of {@link Handlers} and the connection's. */
export interface ClientHandlers extends Handlers {
  /** onSendResult: a queued send ended (its seq, or a permanent refusal); once per send. */
  onSendResult?(r: SendResult): void;
  /** onStatus: the connection changed (for a UI). */
  onStatus?(s: Status): void;
  /** onReceipt: another member read up to a seq (live, WebSocket only). */
  onReceipt?(r: ReceiptEvent): void;
  /** onTyping: another member types or stopped (WebSocket only). */
  onTyping?(t: TypingEvent): void;
  /** onPresence: a user who shares a conversation came online or went offline (WebSocket only). */
  onPresence?(p: Presence): void;
}

/**
 * ClientConfig configures a {@link Client}. Every duration is in ms unless
 * its name says otherwise; zero or absent means the default (each field's
 * `@defaultValue`), so only baseUrl and token are required. An invalid
 * value (pageSize or longPollWaitSec out of range) makes Client.create
 * throw.
 */
export interface ClientConfig {
  /** baseUrl: the gateway's origin (`https://chat.example.com`); required. */
  baseUrl: string;
  /** token: a bearer token, or a source asked again (refresh=true) once after a 401; required. */
  token: string | TokenSource;
  /**
   * store: where the state (cursor, epoch, holes, outbox) is saved. The
   * default keeps it in memory: nothing survives the process, so every start
   * syncs from scratch and queued sends are lost.
   *
   * @defaultValue a new {@link MemoryStore}
   */
  store?: Store;
  /** handlers: the app's callbacks; none are required. */
  handlers?: ClientHandlers;
  /**
   * WebSocket: the constructor the client connects with. In Node 20 pass
   * `ws`'s. None at all (no global one either): long-polling only.
   *
   * @defaultValue `globalThis.WebSocket`
   */
  WebSocket?: WebSocketCtor;
  /**
   * fetch: the HTTP client of the sync, the sends and the app's calls.
   *
   * @defaultValue `globalThis.fetch`
   */
  fetch?: FetchLike;
  /**
   * transport: "auto" connects over the WebSocket, long-polls after
   * wsFallbackAfter failed sessions (or a refused upgrade) and tries the
   * WebSocket again after pollingPeriodMs; "websocket" never long-polls (a
   * refused upgrade is a PermanentError); "polling" only long-polls.
   *
   * @defaultValue "auto"
   */
  transport?: Transport;
  /**
   * startupJitterMs: a random wait in [0, it) before the first connection,
   * so that clients started together (a deploy, a reload of many tabs) do
   * not connect together; negative: none.
   *
   * @defaultValue 1000
   */
  startupJitterMs?: number;
  /**
   * backoffInitialMs: the cap of the first retry's wait; it doubles per
   * failure up to backoffMaxMs, and each wait is uniform in [0, cap] (full
   * jitter spreads a crowd of clients that failed together best).
   *
   * @defaultValue 500
   */
  backoffInitialMs?: number;
  /**
   * backoffMaxMs: the highest cap of a retry's wait. Higher spares a gateway
   * that is down for long; lower reconnects sooner after it is back.
   *
   * @defaultValue 30000
   */
  backoffMaxMs?: number;
  /**
   * stablePeriodMs: a connection up this long resets the backoff (and a
   * WebSocket session this long does not count towards wsFallbackAfter), so
   * a gateway that accepts and drops at once is still backed off from.
   *
   * @defaultValue 30000
   */
  stablePeriodMs?: number;
  /**
   * breakerThreshold: connection attempts in a row that never got through
   * before the circuit opens for breakerCooldownMs; then one probe is let
   * through, and a failed probe opens it again.
   *
   * @defaultValue 8
   */
  breakerThreshold?: number;
  /**
   * breakerCooldownMs: how long the open circuit refuses attempts (jittered
   * +0..20%).
   *
   * @defaultValue 60000
   */
  breakerCooldownMs?: number;
  /**
   * wsFallbackAfter: failed (shorter than stablePeriodMs) WebSocket sessions
   * in a row before the client long-polls (transport "auto"). A refused
   * upgrade falls back at once.
   *
   * @defaultValue 3
   */
  wsFallbackAfter?: number;
  /**
   * pollingPeriodMs: how long to long-poll after a fallback before the
   * WebSocket is tried again.
   *
   * @defaultValue 300000
   */
  pollingPeriodMs?: number;
  /**
   * longPollWaitSec: how long, in seconds, the server holds a long-poll
   * without news before it answers; 1..30.
   *
   * @defaultValue 25
   */
  longPollWaitSec?: number;
  /**
   * pageSize: entries per HTTP sync page; 1..200.
   *
   * @defaultValue 200
   */
  pageSize?: number;
  /**
   * gapWaitMs: how long a push beyond a missing entry waits for it (pushes
   * can arrive out of order across reconnects) before the client pulls it
   * over HTTP.
   *
   * @defaultValue 500
   */
  gapWaitMs?: number;
  /**
   * headWaitMs: how long the client waits for a push when the server's head
   * (welcome, heartbeat) is beyond its cursor before it pulls over HTTP.
   *
   * @defaultValue 1000
   */
  headWaitMs?: number;
  /**
   * requestTimeoutMs: an HTTP request's timeout (a long-poll adds its wait),
   * and how long the WebSocket's welcome may take.
   *
   * @defaultValue 15000
   */
  requestTimeoutMs?: number;
  /**
   * pendingRecheckMs: after a send answered 202 (in the log, no seq yet),
   * how long before the same msg_id is posted again (doubling up to
   * backoffMaxMs), unless its message arrived in the inbox first.
   *
   * @defaultValue 2000
   */
  pendingRecheckMs?: number;
  /**
   * commitEvery: the cursor is saved after this many entries (and after
   * each page). 1 saves after every handler; more saves less often, and
   * after a crash up to commitEvery-1 handled entries come again.
   *
   * @defaultValue 1
   */
  commitEvery?: number;
  /**
   * sendTimeoutMs: how long a send over the WebSocket waits for its
   * send_ack before it is sent again (with the same msg_id).
   *
   * @defaultValue 10000
   */
  sendTimeoutMs?: number;
  /**
   * sendOverHttp: send over HTTP even while a WebSocket session is up.
   *
   * @defaultValue false
   */
  sendOverHttp?: boolean;
  /**
   * backfillPage: messages per backfill page, and per read of a read-mode
   * conversation's new messages and changes.
   *
   * @defaultValue 100
   */
  backfillPage?: number;
  /**
   * showBlocked: hand the messages whose sender the user blocks (`sender_blocked`, emptied by the server, in their places)
   * to the handlers and history like any other. By default they are kept from onEntry, onUpdate, onHistory, history and
   * backfill's messages; the cursor moves past them all the same.
   *
   * @defaultValue false
   */
  showBlocked?: boolean;
}

type Resolved = Required<Omit<ClientConfig, "store" | "handlers" | "WebSocket" | "fetch" | "token">>;

/**
 * defaults are ClientConfig's defaults; each field's `@defaultValue` says the
 * same (test/unit/exports.test.ts checks it).
 *
 * @internal
 */
export const defaults: Readonly<Resolved> = {
  baseUrl: "", transport: "auto", startupJitterMs: 1000, backoffInitialMs: 500, backoffMaxMs: 30000,
  stablePeriodMs: 30000, breakerThreshold: 8, breakerCooldownMs: 60000, wsFallbackAfter: 3,
  pollingPeriodMs: 300000, longPollWaitSec: 25, pageSize: 200, gapWaitMs: 500, headWaitMs: 1000,
  requestTimeoutMs: 15000, pendingRecheckMs: 2000, commitEvery: 1, backfillPage: 100,
  sendTimeoutMs: 10000, sendOverHttp: false, showBlocked: false,
};

/** Attempt is one connection attempt's outcome, for the backoff, the breaker and the fallback. */
interface Attempt {
  gotThrough: boolean; // a welcome or a 2xx came back
  stable: boolean; // it stayed up for stablePeriodMs (or polled its whole period)
  retryAfterMs?: number;
  exact?: boolean; // retryAfterMs is a moment the server picked for this client: no jitter on top
  away?: boolean; // the gateway is away (hinted close, refused connection): no count against the WebSocket
  lost?: boolean; // a session that was up ended without a close frame: the crash hint applies
  fallback?: boolean; // the upgrade was refused: long-poll now
  periodEnded?: boolean; // the polling period is over: try the WebSocket at once
  fatal?: Error;
}

/** BackfillResult is what one {@link Client.backfill} call read. */
export interface BackfillResult {
  /** messages: the page's messages that were in a hole (also given to onHistory), ascending. */
  messages: Message[];
  /** updates: messages delivered before a too_long whose state changed since (also given to onUpdate). */
  updates: Message[];
  /** remaining: the holes and stale ranges still to read. */
  remaining: Hole[];
}

/**
 * Client is the sync loop of one device of one user: it keeps the cursor
 * and epoch in its {@link Store}, hands each inbox entry to the handlers
 * once and in order, repairs gaps and too-long jumps, and sends queued
 * messages. Make it with {@link Client.create}, run it with
 * {@link Client.start}, end it with {@link Client.stop}. Run one Client per
 * store: two would overwrite each other's cursor and outbox.
 */
export class Client {
  private readonly cfg: Resolved;
  private readonly api: Api;
  private readonly inbox: Inbox;
  private readonly outbox: Outbox;
  private readonly backoff: Backoff;
  private readonly crash = new CrashPlan();
  private reconnectHint?: Reconnect; // the last welcome's
  private readonly breaker: CircuitBreaker;
  private abort?: AbortController;
  private running?: Promise<void>;
  private etag?: string;

  private constructor(config: ClientConfig, store: Store, state: ReturnType<typeof emptyState>) {
    this.cfg = resolve(config);
    const token = config.token;
    this.api = new Api({
      baseUrl: this.cfg.baseUrl, fetch: config.fetch, requestTimeoutMs: this.cfg.requestTimeoutMs,
      token: typeof token === "string" ? () => token : token, staticToken: typeof token === "string",
    });
    const saver = new Saver(store, state);
    this.handlers = config.handlers ?? {};
    this.WebSocket = config.WebSocket ?? (globalThis as { WebSocket?: WebSocketCtor }).WebSocket;
    this.inbox = new Inbox(state, saver, this.handlers, this.cfg.commitEvery, this.cfg.showBlocked);
    this.outbox = new Outbox(state, saver, this.api, {
      backoffInitialMs: this.cfg.backoffInitialMs, backoffMaxMs: this.cfg.backoffMaxMs,
      pendingRecheckMs: this.cfg.pendingRecheckMs, onResult: (r) => this.handlers.onSendResult?.(r),
      sendTimeoutMs: this.cfg.sendTimeoutMs,
    });
    // A failed save here shows up at the next save, which the loop awaits.
    this.inbox.ownMessage = (m) => void this.outbox.seen(m).catch(() => undefined);
    this.inbox.largeReader = {
      after: (cid, after, limit) => this.api.historyAfter(cid, after, limit, this.abort?.signal),
      changed: (cid, changedAfter, limit) => this.api.historyChanged(cid, changedAfter, limit, this.abort?.signal),
      page: this.cfg.backfillPage,
    };
    this.backoff = new Backoff({ initialMs: this.cfg.backoffInitialMs, maxMs: this.cfg.backoffMaxMs });
    this.breaker = new CircuitBreaker({ threshold: this.cfg.breakerThreshold, cooldownMs: this.cfg.breakerCooldownMs });
  }

  private readonly handlers: ClientHandlers;
  private readonly WebSocket?: WebSocketCtor;

  /** create loads the state from the store (once) and returns a stopped client. */
  static async create(config: ClientConfig): Promise<Client> {
    const store = config.store ?? new MemoryStore();
    const state = (await store.load()) ?? emptyState();
    return new Client(config, store, state);
  }

  /** cursor: the inbox_seq of the last entry handed over (and saved with the handler's success). */
  get cursor(): number {
    return this.inbox.cursor;
  }

  /** epoch: the server's inbox epoch the cursor belongs to (0 before the first sync). */
  get epoch(): number {
    return this.inbox.epoch;
  }

  /**
   * start runs the sync loop and the outbox until stop() (then it resolves
   * after a last save) or a fatal error (it rejects with it: PermanentError,
   * HandlerError, StoreError). Temporary failures never end it.
   */
  start(): Promise<void> {
    if (this.running) return this.running;
    const ac = new AbortController();
    this.abort = ac;
    this.running = this.runAll(ac).finally(() => {
      this.running = undefined;
    });
    return this.running;
  }

  /** stop ends start() and waits for it (a handler running is let finish). */
  async stop(): Promise<void> {
    this.abort?.abort();
    await this.running?.catch(() => undefined);
  }

  /** counts: the user's unread and mention totals as the server last sent them. */
  get counts(): Counts {
    return this.inbox.getCounts();
  }

  // The app's calls (app.ts): one HTTP call each, rejecting with an
  // ApiError (or the network's error); none touches the sync state.

  /** conversations reads the whole conversation list (every page). */
  conversations(signal?: AbortSignal): Promise<Record[]> {
    return app.conversations(this.api, signal);
  }

  /** history reads up to limit messages with seq < before (0: the newest), ascending. It does not fill holes (see backfill). */
  async history(conversationId: number, before: number, limit: number, signal?: AbortSignal): Promise<History> {
    const h = await app.history(this.api, conversationId, before, limit, signal);
    return { ...h, messages: h.messages.filter((m) => !this.inbox.hidden(m)) };
  }

  /**
   * block blocks a user (docs/protocol.md, "Blocks"): once the server has projected it, the user's messages reach this one
   * emptied and marked `sender_blocked` (kept from the handlers unless showBlocked), its typing, presence and receipts
   * are not shown, and it cannot start a conversation with this user or add it to one. Blocking again changes nothing.
   */
  block(userId: number, signal?: AbortSignal): Promise<void> {
    return app.block(this.api, userId, true, signal);
  }

  /** unblock lifts a block; the history shows the user's messages again when read again. */
  unblock(userId: number, signal?: AbortSignal): Promise<void> {
    return app.block(this.api, userId, false, signal);
  }

  /** blocks lists the users the user blocks, by user id, as the server has projected them. */
  blocks(signal?: AbortSignal): Promise<app.Block[]> {
    return app.blocks(this.api, signal);
  }

  /**
   * search finds messages the user may see (those a history read would show it, in every conversation it is or was a
   * member of), minus deleted and system messages and the messages of the senders it blocks (the server leaves those
   * out, whatever showBlocked), by their current text: one page. Bad parameters reject with an ApiError 400, a search
   * that ran too long with a retryable one (503).
   */
  search(query: app.SearchQuery, signal?: AbortSignal): Promise<app.SearchPage> {
    return app.search(this.api, query, signal);
  }

  /**
   * searchPages reads the pages of a query one after the other, from its cursor, until the last one (an error
   * rejects the iteration). Pages are keyset pages: a message that arrives meanwhile does not shift them.
   *
   * ```ts
   * for await (const page of client.searchPages({ q: "lunch" })) for (const r of page.results) show(r);
   * ```
   */
  searchPages(query: app.SearchQuery, signal?: AbortSignal): AsyncGenerator<app.SearchPage, void, undefined> {
    return app.searchPages(this.api, query, signal);
  }

  /** createConversation makes a conversation (the user is always a member) and returns its id. */
  createConversation(title: string, memberIds: number[], signal?: AbortSignal): Promise<number> {
    return this.api.createConversation(title, memberIds, signal);
  }

  /** members lists the conversation's members (every page). */
  members(conversationId: number, signal?: AbortSignal): Promise<Member[]> {
    return app.members(this.api, conversationId, signal);
  }

  /** addMember adds a user to the conversation. */
  addMember(conversationId: number, userId: number, signal?: AbortSignal): Promise<void> {
    return app.addMember(this.api, conversationId, userId, signal);
  }

  /** removeMember removes a user from the conversation. */
  removeMember(conversationId: number, userId: number, signal?: AbortSignal): Promise<void> {
    return app.removeMember(this.api, conversationId, userId, signal);
  }

  /**
   * setRole gives a member a role ("owner", "admin", "moderator", "member";
   * docs/protocol.md, "Roles") as the caller's own role allows; retried with
   * one change_id while the failure is temporary. A refusal rejects with its
   * ApiError (403 forbidden: the caller's role; 404 no such member; 400).
   */
  setRole(conversationId: number, userId: number, role: string, opts: ChangeOptions = {}): Promise<void> {
    return app.setRole(this.api, conversationId, userId, role, opts, this.changeBackoff());
  }

  /**
   * updateConversation renames the conversation, freezes or unfreezes it, or
   * sets its slow mode (docs/protocol.md, "Frozen and slow mode") as the
   * caller's role allows; retried with one change_id while the failure is
   * temporary. A refusal rejects with its ApiError (403 forbidden: the
   * caller's role; 404 no such conversation; 400). The new settings reach
   * the records through the inbox.
   */
  updateConversation(conversationId: number, settings: ConversationSettings, opts: ChangeOptions = {}): Promise<void> {
    return app.updateConversation(this.api, conversationId, settings, opts, this.changeBackoff());
  }

  /**
   * ban bans a user from a conversation (docs/protocol.md, "Ban and mute"):
   * a member is removed and nobody may add the user until the ban lapses at
   * until (absent: until unban). A moderator or above bans those of lower
   * roles; a refusal rejects with its ApiError (403 forbidden, 403
   * not_member, 400). Retried as setRole is.
   */
  ban(conversationId: number, userId: number, until?: Date, opts: ChangeOptions = {}): Promise<void> {
    return app.sanction(this.api, "PUT", "bans", conversationId, userId, until, opts, this.changeBackoff());
  }

  /** unban lifts a ban; lifting none changes nothing. */
  unban(conversationId: number, userId: number, opts: ChangeOptions = {}): Promise<void> {
    return app.sanction(this.api, "DELETE", "bans", conversationId, userId, undefined, opts, this.changeBackoff());
  }

  /** mute mutes a member until until (absent: until unmute): it reads, but its sends, edits, reactions and typing are refused or dropped. */
  mute(conversationId: number, userId: number, until?: Date, opts: ChangeOptions = {}): Promise<void> {
    return app.sanction(this.api, "PUT", "mutes", conversationId, userId, until, opts, this.changeBackoff());
  }

  /** unmute lifts a mute; lifting none changes nothing. */
  unmute(conversationId: number, userId: number, opts: ChangeOptions = {}): Promise<void> {
    return app.sanction(this.api, "DELETE", "mutes", conversationId, userId, undefined, opts, this.changeBackoff());
  }

  /** bans lists the bans that stand, for a moderator or above (ApiError 403 otherwise). */
  bans(conversationId: number, signal?: AbortSignal): Promise<Sanction[]> {
    return app.sanctions(this.api, "bans", conversationId, signal);
  }

  /** mutes lists the mutes that stand, as bans does. */
  mutes(conversationId: number, signal?: AbortSignal): Promise<Sanction[]> {
    return app.sanctions(this.api, "mutes", conversationId, signal);
  }

  private changeBackoff(): { initialMs: number; maxMs: number } {
    return { initialMs: this.cfg.backoffInitialMs, maxMs: this.cfg.backoffMaxMs };
  }

  /** markRead moves the user's read position (never backwards); its record entry follows. */
  markRead(conversationId: number, seq: number, signal?: AbortSignal): Promise<void> {
    return app.markRead(this.api, conversationId, seq, signal);
  }

  /** setRecord pins or mutes the conversation for the user (the fields given); its record entry follows. */
  setRecord(conversationId: number, p: { pinned?: boolean; muted?: boolean }, signal?: AbortSignal): Promise<void> {
    return app.setRecord(this.api, conversationId, p, signal);
  }

  /** receipts lists how far each member who shows receipts has read the conversation. */
  receipts(conversationId: number, signal?: AbortSignal): Promise<Receipt[]> {
    return app.receipts(this.api, conversationId, signal);
  }

  /** presence reads the presence of users who share a conversation with the user, as they let it be seen. */
  presence(userIds: number[], signal?: AbortSignal): Promise<Presence[]> {
    return app.presence(this.api, userIds, signal);
  }

  /** settings reads the user's settings. */
  settings(signal?: AbortSignal): Promise<Settings> {
    return app.settings(this.api, undefined, signal);
  }

  /** setSettings changes the settings the patch names and returns them all. */
  setSettings(patch: SettingsPatch, signal?: AbortSignal): Promise<Settings> {
    return app.settings(this.api, patch, signal);
  }

  /** applyChange changes a message (over HTTP, retried with its change_id while temporary); its update entry reaches onEntry too. */
  applyChange(change: Change, opts?: ChangeOptions): Promise<ChangeResult> {
    return app.applyChange(this.api, change, { initialMs: this.cfg.backoffInitialMs, maxMs: this.cfg.backoffMaxMs }, opts);
  }

  /** edit replaces a message's body (applyChange with kind "edit"). */
  edit(conversationId: number, seq: number, body: string, opts?: ChangeOptions): Promise<ChangeResult> {
    return this.applyChange({ kind: "edit", conversationId, seq, body }, opts);
  }

  /** delete deletes a message (applyChange with kind "delete"). */
  delete(conversationId: number, seq: number, opts?: ChangeOptions): Promise<ChangeResult> {
    return this.applyChange({ kind: "delete", conversationId, seq }, opts);
  }

  /** react sets the user's reaction to a message (applyChange with kind "react"). */
  react(conversationId: number, seq: number, emoji: string, opts?: ChangeOptions): Promise<ChangeResult> {
    return this.applyChange({ kind: "react", conversationId, seq, emoji }, opts);
  }

  /** unreact removes the user's reaction from a message (applyChange with kind "unreact"). */
  unreact(conversationId: number, seq: number, opts?: ChangeOptions): Promise<ChangeResult> {
    return this.applyChange({ kind: "unreact", conversationId, seq }, opts);
  }

  /**
   * report reports a message to the deployment's moderators (docs/protocol.md,
   * "Reports"); nobody else is told. Retried with its report id while the
   * failure is temporary; a refusal rejects with its ApiError (403, 404, 400
   * one's own or a system message or an unknown reason, 413 a long note).
   */
  report(conversationId: number, seq: number, opts: ReportOptions): Promise<ReportResult> {
    return app.reportMessage(this.api, conversationId, seq, opts, { initialMs: this.cfg.backoffInitialMs, maxMs: this.cfg.backoffMaxMs });
  }

  /**
   * sendTyping tells the other members that the user types (or stopped),
   * over the WebSocket only: false when no session is up (typing is worth
   * nothing later, so it is not queued). The server passes one start per
   * user and conversation every 2 s.
   */
  sendTyping(conversationId: number, stop = false): boolean {
    if (!this.wsChannel || !(conversationId > 0)) return false;
    this.wsChannel.send(stop ? { type: "typing", conversation_id: conversationId, state: "stop" } : { type: "typing", conversation_id: conversationId });
    return true;
  }

  private wsChannel?: { send(frame: object): void };

  /** ephemeral hands a typing, presence or receipt frame to its handler. */
  private ephemeral(f: ServerFrame): void {
    const h = this.handlers;
    try {
      if (f.type === "typing" && f.conversation_id && f.user_id) {
        h.onTyping?.({ conversation_id: f.conversation_id, user_id: f.user_id, stop: f.state === "stop", expires_in_ms: f.expires_in_ms ?? 0 });
      } else if (f.type === "presence" && f.user_id) {
        h.onPresence?.({ user_id: f.user_id, online: f.online === true, ...(f.last_seen ? { last_seen: f.last_seen } : {}) });
      } else if (f.type === "receipt" && f.conversation_id && f.user_id && f.read_seq !== undefined) {
        h.onReceipt?.({ conversation_id: f.conversation_id, user_id: f.user_id, read_seq: f.read_seq });
      }
    } catch {
      // an ephemeral callback's error is the app's: it must not end the session
    }
  }

  private async runAll(ac: AbortController): Promise<void> {
    const fatal = (err: unknown) => {
      if (!ac.signal.aborted) ac.abort(err);
      throw err;
    };
    try {
      await Promise.all([this.loop(ac.signal).catch(fatal), this.outbox.run(ac.signal).catch(fatal)]);
      this.status({ state: "stopped" });
    } catch (err) {
      this.status({ state: "stopped", error: err });
      throw err;
    }
  }

  /**
   * upload uploads a file to conversationId (docs/protocol.md, "Attachments"):
   * it asks the server for an upload, seals the file with the key it got and
   * PUTs it straight to the object store, whole or, from MultipartThreshold
   * (or whenever the server answers so), in parts, each sealed and PUT on
   * its own URL, then completed. Attach the returned upload's id with send's
   * `attachments` option; an upload not attached within a day (the server's
   * default) is removed. It resolves to the server's answer: for a
   * multipart upload the completion's (state "uploaded"), for a whole-file
   * one the creation's.
   *
   * A refusal of the upload itself (a file too large: 413) rejects with an
   * ApiError. Once the server made it (file.onCreated tells its id at
   * once), a failure rejects with an UploadError whose id resumeUpload
   * takes, sending only what the store still lacks.
   */
  async upload(conversationId: number, file: UploadFile): Promise<Upload> {
    return uploads.upload(this.api, conversationId, file);
  }

  /**
   * resumeUpload takes up upload id of conversationId, made by upload (here
   * or in an earlier run of the app) for the same file: it asks the server
   * what the store still lacks and sends only that: the parts missing of a
   * multipart upload, then its completion (whose answer it resolves to), or
   * a whole-file upload again from its start. An upload already whole or
   * attached resolves as it is;
   * one expired or removed rejects with an ApiError of status 404 (upload
   * the file again), a file of another size with an Error. A failure after
   * the server's first answer is an UploadError, to resume again.
   */
  async resumeUpload(conversationId: number, id: string, file: UploadFile): Promise<Upload> {
    return uploads.resumeUpload(this.api, conversationId, id, file);
  }

  /** download returns the file a message attaches, opened with its key (changed bytes are refused). */
  async download(conversationId: number, a: Attachment): Promise<Uint8Array> {
    return this.fetchOpen(conversationId, a.id, false, a.size, fromBase64Url(a.key));
  }

  /** downloadThumbnail returns an attached image's thumbnail (a JPEG), once the server made it. */
  async downloadThumbnail(conversationId: number, a: Attachment): Promise<Uint8Array> {
    if (!a.thumbnail) throw new Error(`inboxd: attachment ${a.id} has no thumbnail (yet)`);
    return this.fetchOpen(conversationId, a.id, true, a.thumbnail.size, await thumbnailKey(fromBase64Url(a.key)));
  }

  private async fetchOpen(conversationId: number, id: string, thumbnail: boolean, size: number, key: Uint8Array): Promise<Uint8Array> {
    const at = await this.api.attachmentUrl(conversationId, id, thumbnail);
    const res = await this.api.raw(at.url, { method: "GET" });
    if (!res.ok) {
      await res.arrayBuffer().catch(() => undefined);
      throw new Error(`inboxd: attachment ${id}: the store answered ${res.status}`);
    }
    return open(new Uint8Array(await res.arrayBuffer()), size, key);
  }

  /** send queues a message (saved before it returns, works offline) and returns its msg_id. */
  send(conversationId: number, body: string, opts?: SendOptions): Promise<string> {
    return this.outbox.enqueue(conversationId, body, opts);
  }

  /** waitSent resolves when the queued send ended; undefined if msgId is not queued (any more). */
  waitSent(msgId: string): Promise<SendResult | undefined> {
    return this.outbox.waitSent(msgId);
  }

  /** pending lists the sends still queued. */
  pending(): readonly { msgId: string; conversationId: number; body: string }[] {
    return this.outbox.items;
  }

  /** holes lists a conversation's missing history. */
  holes(conversationId: number): Hole[] {
    return this.inbox.conv(conversationId).holes.map((h) => ({ ...h }));
  }

  /**
   * backfill reads one page (backfillPage messages) of the newest range of
   * the conversation still to read, newest first: a history hole (its
   * messages go to onHistory and come back in messages) or, after a
   * too_long, messages delivered before it whose changes the jump skipped
   * (the changed ones go to onUpdate and come back in updates). Call it until
   * remaining is empty. A conversation the user can no longer read (403,
   * 404) has its ranges dropped and the error rejects. It takes the delivery
   * lock (an entry and a page racing for one message cannot both hand it
   * over), so a handler must not await it: it would wait for itself.
   */
  async backfill(conversationId: number, signal?: AbortSignal): Promise<BackfillResult> {
    return this.inbox.lock.run(async () => {
      const ranges = this.inbox.toRead(conversationId);
      const hole = ranges[ranges.length - 1];
      if (!hole) return { messages: [], updates: [], remaining: [] };
      const limit = Math.min(this.cfg.backfillPage, hole.to - hole.from + 1);
      let page: History;
      try {
        page = await this.api.history(conversationId, hole.to + 1, limit, signal);
      } catch (err) {
        if (err instanceof ApiError && (err.status === 403 || err.status === 404)) await this.inbox.forget(conversationId);
        throw err;
      }
      // The page covers (lowest seq returned .. hole.to]; with nothing older visible, everything down to seq 1.
      const from = page.has_more && page.messages.length > 0 ? Math.min(...page.messages.map((m) => m.seq)) : 1;
      const got = await this.inbox.fillPage(conversationId, page.messages, from, hole.to);
      return { ...got, remaining: this.inbox.toRead(conversationId) };
    });
  }

  /** sync pulls over HTTP until the client is at the head (a repair, or a sync without a loop). */
  async sync(signal?: AbortSignal): Promise<void> {
    for (;;) {
      const r = await this.syncOnce({ after: this.inbox.cursor, epoch: this.inbox.epoch || undefined, limit: this.cfg.pageSize }, signal);
      if (!r?.has_more) return;
    }
  }

  /** syncOnce makes one GET /v1/sync and applies it; an answer that does not continue the cursor is an error (retried, never skipped). */
  private async syncOnce(p: SyncParams, signal?: AbortSignal): Promise<SyncAnswer | undefined> {
    const { answer, etag } = await this.api.sync({ ...p, etag: this.etag }, signal);
    this.etag = etag;
    if (!answer) return undefined;
    this.inbox.setCounts(answer);
    if (answer.too_long) {
      await this.inbox.tooLong(answer as TooLongAnswer, (page) => this.api.conversations(page, signal));
      await this.inbox.largeAnswer(answer.large ?? []);
      return answer;
    }
    await this.inbox.adoptEpoch(answer.epoch);
    // Read-mode conversations are marked before the entries (a mention's gap is read first), caught up after.
    await this.inbox.noteLarge(answer.large ?? []);
    if ((await this.inbox.apply(answer.entries ?? [])) === "gap") {
      throw new ApiError(0, "gap", `sync page after ${p.after} does not continue the cursor`, true);
    }
    await this.inbox.catchUpLarge(answer.large ?? []);
    return answer;
  }

  private status(s: Status): void {
    try {
      this.handlers.onStatus?.(s);
    } catch {
      // a status callback must not break the loop
    }
  }

  private async loop(signal: AbortSignal): Promise<void> {
    if (this.cfg.startupJitterMs > 0) await sleep(Math.random() * this.cfg.startupJitterMs, signal);
    let wsFailures = 0;
    let pollUntil = this.cfg.transport === "polling" || !this.WebSocket ? Infinity : 0;
    while (!signal.aborted) {
      const open = this.breaker.waitMs();
      if (open > 0) {
        this.status({ state: "circuit_open", untilMs: Date.now() + open });
        await sleep(open, signal);
        continue;
      }
      const useWs = Date.now() >= pollUntil;
      const a = useWs ? await this.wsAttempt(signal) : await this.pollAttempt(signal, pollUntil);
      if (a.fatal) throw a.fatal;
      if (signal.aborted) return;
      if (a.gotThrough) this.breaker.success();
      else this.breaker.failure();
      if (a.stable) this.backoff.reset();
      if (a.gotThrough) this.crash.arm(a.lost === true, this.reconnectHint);
      if (useWs) {
        if (a.stable) wsFailures = 0;
        else if (!a.away) wsFailures++;
        if (this.cfg.transport === "auto" && (a.fallback || wsFailures >= this.cfg.wsFallbackAfter)) {
          pollUntil = Date.now() + this.cfg.pollingPeriodMs;
          wsFailures = 0;
          continue; // long-poll at once: the HTTP sync decides what is permanent
        }
      } else if (a.periodEnded) {
        continue; // the polling period ended: try the WebSocket now
      }
      await this.pause(a, signal);
    }
  }

  private async pause(a: Attempt, signal: AbortSignal): Promise<void> {
    let wait = a.retryAfterMs !== undefined ? (a.exact ? a.retryAfterMs : jitterUp(a.retryAfterMs, 0.2)) : this.backoff.next();
    // A browser cannot tell a refused connection from a refused upgrade:
    // any attempt that did not get through counts as finding the gateway away.
    const crash = a.gotThrough ? undefined : this.crash.waitMs(true);
    if (crash !== undefined && a.retryAfterMs === undefined) wait = crash; // the welcome's hint, after a loss without a word
    this.status({ state: "waiting", untilMs: Date.now() + wait, reason: a.retryAfterMs !== undefined ? "retry-after" : "backoff" });
    await sleep(wait, signal);
  }

  private async wsAttempt(signal: AbortSignal): Promise<Attempt> {
    this.status({ state: "connecting", transport: "websocket" });
    const url = new URL(this.api.baseUrl + "/v1/ws");
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("access_token", await this.api.bearer());
    const end = await runWsSession({
      url: url.toString(), WebSocket: this.WebSocket!, signal,
      cursor: () => this.inbox.cursor, epoch: () => this.inbox.epoch,
      apply: (e) => this.inbox.apply(e),
      tooLong: (t) => this.inbox.tooLong(t, (page) => this.api.conversations(page, signal)),
      pull: () => this.sync(signal),
      large: (list) => this.inbox.largeAnswer(list),
      messages: (f, trusted) => this.inbox.messages(f, trusted),
      changeCount: (cid) => this.inbox.changeCount(cid),
      onWelcome: (f) => {
        this.reconnectHint = f.reconnect;
        this.status({ state: "connected", transport: "websocket", head: f.head });
        void this.inbox.adoptEpoch(f.epoch ?? 0);
      },
      onHint: (h) => { this.reconnectHint = h; },
      counts: (f) => this.inbox.setCounts(f),
      channel: (ch) => {
        this.wsChannel = ch;
        if (!this.cfg.sendOverHttp) this.outbox.setChannel(ch);
      },
      ephemeral: (f) => this.ephemeral(f),
      sendAnswer: (f) => this.outbox.frame(f),
      gapWaitMs: this.cfg.gapWaitMs, headWaitMs: this.cfg.headWaitMs, helloTimeoutMs: this.cfg.requestTimeoutMs,
    });
    return this.wsOutcome(end);
  }

  private wsOutcome(end: WsEnd): Attempt {
    const stable = end.welcomedAt !== undefined && Date.now() - end.welcomedAt >= this.cfg.stablePeriodMs;
    const a: Attempt = { gotThrough: end.welcomed, stable, fatal: end.fatal };
    if (end.closeCode === 4001 || end.closeCode === 4003) {
      a.fatal = new PermanentError(undefined, end.closeCode, end.lastError?.code ?? "closed", `websocket closed ${end.closeCode}: ${end.closeReason ?? ""}`);
    } else if (end.closeCode === 4029 && end.lastError?.retry_after_ms) {
      a.retryAfterMs = end.lastError.retry_after_ms;
    } else if ((end.closeCode === 1012 || end.closeCode === 1013) && end.lastError?.retry_after_ms) {
      // A draining (1012) or starting (1013) gateway's reconnect hint.
      a.retryAfterMs = end.lastError.retry_after_ms;
      a.exact = a.away = true;
    }
    if (end.welcomed && (end.closeCode === undefined || end.closeCode === 1006)) a.lost = true;
    if (end.upgradeRetryAfterMs !== undefined) a.retryAfterMs = end.upgradeRetryAfterMs;
    const st = end.upgradeStatus;
    if (st !== undefined && st >= 400 && st < 500 && st !== 408 && st !== 429) {
      if (this.cfg.transport === "websocket") {
        a.fatal = new PermanentError(st, undefined, "upgrade_refused", `websocket upgrade refused with ${st}`);
      } else a.fallback = true;
    }
    return a;
  }

  /**
   * pollAttempt long-polls until `until`: the first request does not wait
   * (it catches up and proves the path); requests start at least the
   * server's next_interval_ms apart (±10%).
   */
  private async pollAttempt(signal: AbortSignal, until: number): Promise<Attempt> {
    this.status({ state: "connecting", transport: "polling" });
    const a: Attempt = { gotThrough: false, stable: false };
    let waitSec = 0;
    let upSince = 0;
    try {
      while (!signal.aborted && Date.now() < until) {
        const started = Date.now();
        const p: SyncParams = { after: this.inbox.cursor, epoch: this.inbox.epoch || undefined, limit: this.cfg.pageSize, waitSec };
        const ans = await this.syncOnce(p, signal);
        if (ans?._polling?.reconnect) this.reconnectHint = ans._polling.reconnect;
        if (!a.gotThrough) this.status({ state: "connected", transport: "polling", head: ans?.head });
        a.gotThrough = true;
        upSince ||= Date.now();
        // As for a WebSocket, only a path that stayed up resets the backoff.
        if (Date.now() - upSince >= this.cfg.stablePeriodMs) this.backoff.reset();
        if (ans?.has_more || ans?.too_long) continue;
        waitSec = this.cfg.longPollWaitSec;
        await sleep(pollGap(started, ans), signal);
      }
      a.stable = true;
      a.periodEnded = true;
    } catch (err) {
      if (signal.aborted) return a;
      a.stable = upSince > 0 && Date.now() - upSince >= this.cfg.stablePeriodMs;
      // A poll lost without an answer (not an ApiError): the crash hint applies.
      if (a.gotThrough && !(err instanceof ApiError)) a.lost = true;
      return { ...a, ...classify(err) };
    }
    return a;
  }
}

/** pollGap is how long to wait before the next poll: the rest of the server's interval (±10%) after an answer. */
function pollGap(started: number, ans: SyncAnswer | undefined): number {
  const interval = ans?._polling?.next_interval_ms ?? 0;
  if (interval <= 0) return 0;
  const jittered = interval * (0.9 + 0.2 * Math.random());
  return Math.max(0, started + jittered - Date.now());
}

/** classify turns a sync failure into the loop's outcome: permanent statuses stop, the rest are retried. */
function classify(err: unknown): Partial<Attempt> {
  if (isFatal(err)) return { fatal: err };
  if (err instanceof ApiError) {
    if (err.status >= 400 && err.status < 500 && !err.retryable) {
      return { fatal: new PermanentError(err.status, undefined, err.code, err.message) };
    }
    return { retryAfterMs: err.retryAfterMs, exact: err.hinted, away: err.hinted };
  }
  return {}; // a network error, an undecodable answer: backoff
}

function resolve(c: ClientConfig): Resolved {
  const r = { ...defaults } as Resolved & { [k: string]: unknown };
  for (const [k, v] of Object.entries(c)) {
    if (k in defaults && v !== undefined && v !== 0) (r as { [k: string]: unknown })[k] = v;
  }
  if (!r.baseUrl) throw new Error("inboxd: baseUrl is required");
  if (!c.token) throw new Error("inboxd: token is required");
  if (r.longPollWaitSec < 1 || r.longPollWaitSec > 30) throw new Error("inboxd: longPollWaitSec must be 1..30");
  if (r.pageSize < 1 || r.pageSize > 200) throw new Error("inboxd: pageSize must be 1..200");
  return r;
}
