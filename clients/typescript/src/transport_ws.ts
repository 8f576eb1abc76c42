// One WebSocket session: hello with the cursor and epoch, the welcome, then
// entries, too_long and heartbeats until the connection ends. The session
// feeds the Inbox; gaps and heads beyond the cursor are repaired over HTTP by
// the pull the client passes in.
import type { ApplyResult } from "./inbox.js";
import type { Entry, LargeHead, Reconnect, ServerFrame, TooLongAnswer } from "./protocol.js";

/** WebSocketLike is the part of the WHATWG WebSocket the client uses (browsers' WebSocket, Node's `ws`). */
export interface WebSocketLike {
  /** readyState: WebSocket.readyState (0 connecting, 1 open, 2 closing, 3 closed). */
  readonly readyState: number;
  /** send sends one text frame. */
  send(data: string): void;
  /** close starts the closing handshake. */
  close(code?: number, reason?: string): void;
  /** onopen: the connection is open. */
  onopen: ((ev: unknown) => void) | null;
  /** onmessage: a frame came (the client reads text frames). */
  onmessage: ((ev: { data: unknown }) => void) | null;
  /** onclose: the connection closed, with the close frame's code and reason (1006: none came). */
  onclose: ((ev: { code: number; reason: string }) => void) | null;
  /** onerror: the connection failed (onclose follows). */
  onerror: ((ev: unknown) => void) | null;
}

/** WebSocketCtor makes a {@link WebSocketLike} for a URL: `globalThis.WebSocket`, or `ws`'s in Node 20. */
export type WebSocketCtor = new (url: string) => WebSocketLike;

/** @internal */
export interface WsSessionDeps {
  url: string;
  WebSocket: WebSocketCtor;
  cursor(): number;
  epoch(): number;
  apply(entries: Entry[]): Promise<ApplyResult>;
  tooLong(t: TooLongAnswer): Promise<void>;
  pull(): Promise<void>;
  onWelcome(f: ServerFrame): void;
  /** onHint: a heartbeat's refreshed reconnect hint. */
  onHint?(h: Reconnect): void;
  /** large: the list of read-mode conversations of a welcome, too_long or large frame (whole). */
  large(list: LargeHead[]): Promise<void>;
  /** messages: a messages frame; trusted: this session saw the conversation's previous change count. */
  messages(f: ServerFrame, trusted: boolean): Promise<void>;
  /** changeCount: the change count applied of a conversation. */
  changeCount(cid: number): number;
  counts(f: ServerFrame): void;
  /** channel: the session was welcomed (sends may go over it) or ended (undefined). */
  channel?(ch: { send(frame: object): void } | undefined): void;
  /** sendAnswer: a send_ack, or an error frame about one send (it carries a msg_id). */
  sendAnswer?(f: ServerFrame): void;
  /** ephemeral: a typing, presence or receipt frame (never in the inbox). */
  ephemeral?(f: ServerFrame): void;
  gapWaitMs: number;
  headWaitMs: number;
  helloTimeoutMs: number; // the welcome must come within this
  signal: AbortSignal;
}

/**
 * WsEnd says how a session ended.
 *
 * @internal
 */
export interface WsEnd {
  welcomed: boolean;
  welcomedAt?: number;
  closeCode?: number;
  closeReason?: string;
  lastError?: ServerFrame; // the error frame before the close (4029 carries retry_after_ms)
  upgradeStatus?: number; // the HTTP status of a refused upgrade, when the implementation tells it
  upgradeRetryAfterMs?: number; // its Retry-After, when the implementation shows the answer (Node's `ws`)
  fatal?: Error; // a handler or store error: the client stops
}

/**
 * runWsSession runs one session to its end; it never rejects.
 *
 * @internal
 */
export function runWsSession(d: WsSessionDeps): Promise<WsEnd> {
  return new Promise((resolve) => new WsSession(d, resolve).start());
}

class WsSession {
  private ws!: WebSocketLike;
  private readonly end: WsEnd = { welcomed: false };
  private chain: Promise<void> = Promise.resolve();
  private deadTimer?: ReturnType<typeof setTimeout>;
  private gapTimer?: ReturnType<typeof setTimeout>;
  private headTimer?: ReturnType<typeof setTimeout>;
  private closeTimer?: ReturnType<typeof setTimeout>;
  private heartbeatMs = 0;
  private done = false;

  constructor(private readonly d: WsSessionDeps, private readonly resolve: (e: WsEnd) => void) {}

  start(): void {
    try {
      this.ws = new this.d.WebSocket(this.d.url);
    } catch (err) {
      this.end.fatal = undefined;
      this.end.closeReason = String(err);
      return this.finish();
    }
    this.ws.onopen = () => this.ws.send(JSON.stringify(this.hello()));
    this.watchRefusal();
    this.ws.onmessage = (ev) => this.onMessage(ev.data);
    this.ws.onerror = (ev) => this.onError(ev);
    this.ws.onclose = (ev) => {
      this.end.closeCode = ev.code;
      this.end.closeReason = ev.reason;
      this.finish();
    };
    this.armDead(this.d.helloTimeoutMs);
    this.d.signal.addEventListener("abort", this.onAbort, { once: true });
  }

  private hello(): { type: "hello"; after: number; epoch?: number; large: true } {
    const h: { type: "hello"; after: number; epoch?: number; large: true } = { type: "hello", after: this.d.cursor(), large: true };
    if (this.d.epoch() > 0) h.epoch = this.d.epoch();
    return h;
  }

  private readonly onAbort = () => this.close(1000, "client stopped");

  /**
   * watchRefusal reads a refused upgrade's status and Retry-After where the
   * implementation shows the answer: Node's `ws` ("unexpected-response"; with
   * a listener, aborting is ours). A browser's WebSocket shows neither.
   */
  private watchRefusal(): void {
    type Res = { statusCode?: number; headers?: { [k: string]: string | string[] | undefined }; resume?(): void };
    const ws = this.ws as unknown as { on?(ev: string, fn: (req: unknown, res: Res) => void): void; terminate?(): void };
    if (typeof ws.on !== "function" || typeof ws.terminate !== "function") return;
    ws.on("unexpected-response", (_req, res) => {
      this.end.upgradeStatus = res.statusCode;
      const ra = res.headers?.["retry-after"];
      const secs = typeof ra === "string" && /^\d+$/.test(ra.trim()) ? Number(ra) : undefined;
      if (secs !== undefined) this.end.upgradeRetryAfterMs = secs * 1000;
      res.resume?.();
      ws.terminate!();
    });
  }

  private onError(ev: unknown): void {
    const m = /Unexpected server response: (\d{3})/.exec(String((ev as { message?: string })?.message ?? ""));
    if (m) this.end.upgradeStatus = Number(m[1]);
  }

  private onMessage(data: unknown): void {
    this.armDead(this.heartbeatMs > 0 ? this.heartbeatMs * 2.5 : this.d.helloTimeoutMs);
    let f: ServerFrame;
    try {
      f = JSON.parse(String(data)) as ServerFrame;
    } catch {
      return this.close(1007, "undecodable frame");
    }
    this.enqueue(() => this.handle(f));
  }

  /** enqueue runs frame handling one at a time, in arrival order. */
  private enqueue(fn: () => Promise<void>): void {
    this.chain = this.chain.then(async () => {
      if (this.done) return;
      try {
        await fn();
      } catch (err) {
        this.fail(err);
      }
    });
  }

  private async handle(f: ServerFrame): Promise<void> {
    this.d.counts(f);
    switch (f.type) {
      case "welcome":
        this.end.welcomed = true;
        this.end.welcomedAt = Date.now();
        this.heartbeatMs = f.heartbeat_ms ?? 0;
        // Frames read before this one armed the hello's deadline: the liveness one applies from now.
        if (this.heartbeatMs > 0) this.armDead(this.heartbeatMs * 2.5);
        this.d.onWelcome(f);
        this.d.channel?.({ send: (frame) => this.ws.send(JSON.stringify(frame)) });
        await this.large(f.large ?? []);
        this.checkHead(f.head ?? 0);
        return;
      case "entries":
        if ((await this.d.apply(f.entries ?? [])) === "gap") this.armGap();
        else this.checkHead(f.head ?? 0);
        return;
      case "too_long":
        await this.d.tooLong(f as unknown as TooLongAnswer);
        await this.large(f.large ?? []);
        this.maxHead = 0; // heads of the old epoch no longer count
        return;
      case "large":
        return this.large(f.large ?? []);
      case "messages": {
        const cid = f.conversation_id ?? 0;
        const trusted = this.changes.has(cid) && this.changes.get(cid) === this.d.changeCount(cid);
        await this.d.messages(f, trusted);
        this.changes.set(cid, this.d.changeCount(cid));
        return;
      }
      case "heartbeat":
        if (f.reconnect) this.d.onHint?.(f.reconnect); // the window grew with the gateway's sessions
        this.checkHead(f.head ?? 0);
        return;
      case "error":
        if (f.msg_id) return this.d.sendAnswer?.(f);
        this.end.lastError = f;
        return;
      case "send_ack":
        return this.d.sendAnswer?.(f);
      case "typing":
      case "presence":
      case "receipt":
        return this.d.ephemeral?.(f);
      default:
        return; // change_ack (changes go over HTTP), kinds to come
    }
  }

  /**
   * changes: per read-mode conversation, the change count this session
   * caught up to (welcome, large frame, messages frame): a messages frame
   * continuing it carries every change since.
   */
  private readonly changes = new Map<number, number>();

  private async large(list: LargeHead[]): Promise<void> {
    await this.d.large(list);
    this.changes.clear();
    for (const h of list) this.changes.set(h.conversation_id, this.d.changeCount(h.conversation_id));
  }

  /** armGap waits gapWaitMs for the missing entries (pushes can arrive out of order across reconnects), then pulls. */
  private armGap(): void {
    if (this.gapTimer) return;
    const at = this.d.cursor();
    this.gapTimer = setTimeout(() => {
      this.gapTimer = undefined;
      if (this.d.cursor() === at) this.enqueue(() => this.d.pull());
      else this.checkHead(0); // it moved, but what is still missing gets the head's wait
    }, this.d.gapWaitMs);
  }

  /** checkHead arms headWaitMs when the server's head is beyond the cursor: no push by then means a pull. */
  // The highest head seen: a timer armed for a lower head still covers it
  // (the cursor moving but staying below it re-arms the wait, it does not end it).
  private maxHead = 0;

  private checkHead(head: number): void {
    this.maxHead = Math.max(this.maxHead, head);
    if (this.maxHead <= this.d.cursor() || this.headTimer) return;
    const at = this.d.cursor();
    this.headTimer = setTimeout(() => {
      this.headTimer = undefined;
      const c = this.d.cursor();
      if (c >= this.maxHead) return;
      if (c === at) {
        this.enqueue(async () => {
          await this.d.pull();
          this.maxHead = this.d.cursor(); // the pull read to the head: what it left is the head now
        });
      } else this.checkHead(0);
    }, this.d.headWaitMs);
  }

  private armDead(ms: number): void {
    clearTimeout(this.deadTimer);
    this.deadTimer = setTimeout(() => this.close(4000, "no frame in time"), ms);
  }

  private fail(err: unknown): void {
    const name = (err as Error)?.name;
    if (name === "HandlerError" || name === "StoreError" || name === "PermanentError") this.end.fatal = err as Error;
    else this.end.closeReason = `repair failed: ${String(err)}`;
    this.close(1000, "client error");
  }

  private close(code: number, reason: string): void {
    try {
      this.ws.close(code >= 4000 || code === 1000 ? code : 1000, reason);
    } catch {
      // already closing
    }
    this.end.closeCode ??= code;
    this.end.closeReason ??= reason;
    // Some implementations never report the close of a socket that did not open: finish anyway.
    this.closeTimer ??= setTimeout(() => this.finish(), 1000);
  }

  private finish(): void {
    if (this.done) return;
    this.done = true;
    if (this.end.welcomed) this.d.channel?.(undefined);
    clearTimeout(this.deadTimer);
    clearTimeout(this.gapTimer);
    clearTimeout(this.headTimer);
    clearTimeout(this.closeTimer);
    this.d.signal.removeEventListener("abort", this.onAbort);
    // Let a frame being handled finish (its handler's cursor save) before reporting the end.
    void this.chain.then(() => this.resolve(this.end));
  }
}
