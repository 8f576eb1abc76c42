// The fake gateway of the conformance scenarios (clients/conformance/README.md),
// the twin of client/conformance_server_test.go: every request takes the first
// step of the script that matches it and still has answers left; a request no
// step takes is held until the scenario ends. Every request is logged.
import { createDecipheriv } from "node:crypto";
import http from "node:http";
import type { AddressInfo, Socket } from "node:net";
import { WebSocketServer, type WebSocket } from "ws";

export interface Matcher {
  method?: string;
  path: string;
  query?: { [k: string]: string };
  headers?: { [k: string]: string };
  body?: unknown;
}

export interface HttpAnswer {
  status?: number;
  headers?: { [k: string]: string };
  body?: unknown;
}

export interface WsReply {
  match: unknown;
  times?: number;
  frames: unknown[];
}

export interface WsScript {
  frames?: unknown[];
  replies?: WsReply[];
  close?: { code: number; reason?: string };
}

export interface Step {
  match: Matcher;
  times?: number;
  min_times?: number;
  respond?: HttpAnswer;
  ws?: WsScript;
  after_step?: number;
  /** sealed: the request (a PUT to the store) must carry this sealed file or part; the server opens it (checkSealed). */
  sealed?: SealedBody;
}

/**
 * SealedBody is what a PUT to the store must carry: the conformance file of
 * size bytes (conformanceFile) sealed with key, whole, or only its part
 * (from 1) in parts of part_size plaintext bytes.
 */
export interface SealedBody {
  key: string;
  size: number;
  part_size?: number;
  part?: number;
}

/**
 * LoggedRequest is one request as the fake server saw it (body: the JSON
 * body, or the hello for /v1/ws; a body that is not JSON, a sealed file, is
 * logged as its size).
 */
export interface LoggedRequest {
  method: string;
  path: string;
  query: { [k: string]: string };
  headers?: { [k: string]: string };
  body?: unknown;
  body_size?: number;
  step: number; // -1: held (beyond the script)
  early?: boolean;
  /** bad_body: why the body is not the sealed bytes the step's sealed asks for. */
  bad_body?: string;
}

// Authorization: the gateway's token must not go to the store;
// X-Amz-Meta-Upload: the header the scenarios' upload answers give.
const loggedHeaders = ["If-None-Match", "Authorization", "X-Amz-Meta-Upload"];

const stepMax = (s: Step) => Math.max(s.times ?? 1, 1);
const stepMin = (s: Step) => s.min_times ?? stepMax(s);

export class ScriptServer {
  readonly log: LoggedRequest[] = [];
  private readonly used: number[];
  private readonly notBefore = new Map<string, number>();
  private readonly server: http.Server;
  private readonly wss = new WebSocketServer({ noServer: true });
  private readonly sockets = new Set<WebSocket>();
  private readonly held = new Set<() => void>();
  private ended = false;
  url = "";

  constructor(private readonly steps: Step[]) {
    this.used = steps.map(() => 0);
    this.server = http.createServer((req, res) => void this.serve(req, res));
    this.server.on("upgrade", (req, socket, head) => void this.upgrade(req, socket as Socket, head));
  }

  async listen(): Promise<void> {
    await new Promise<void>((resolve) => this.server.listen(0, "127.0.0.1", resolve));
    const a = this.server.address() as AddressInfo;
    this.url = `http://127.0.0.1:${a.port}`;
  }

  /** close ends held requests and WebSocket connections, then the server. */
  async close(): Promise<void> {
    this.ended = true;
    for (const f of [...this.held]) f();
    for (const ws of this.sockets) ws.terminate();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  /** consumed reports whether every step got at least its minimum of requests. */
  consumed(): boolean {
    return this.steps.every((s, i) => this.used[i] >= stepMin(s));
  }

  private logged(req: http.IncomingMessage, raw: Buffer): LoggedRequest {
    const u = new URL(req.url ?? "/", "http://x");
    const lr: LoggedRequest = { method: req.method ?? "GET", path: u.pathname, query: {}, step: -1 };
    for (const [k, v] of u.searchParams) if (!(k in lr.query)) lr.query[k] = v;
    for (const h of loggedHeaders) {
      const v = req.headers[h.toLowerCase()];
      if (typeof v === "string" && v !== "") (lr.headers ??= {})[h] = v;
    }
    if (raw.length > 0) {
      try {
        lr.body = JSON.parse(raw.toString("utf8"));
      } catch {
        lr.body_size = raw.length;
      }
    }
    return lr;
  }

  /** choose marks an early request and takes the first step with answers left that matches. */
  private choose(lr: LoggedRequest): number {
    const nb = this.notBefore.get(lr.path);
    if (nb !== undefined && Date.now() < nb) lr.early = true;
    const idx = this.steps.findIndex((s, i) => this.used[i] < stepMax(s) && matches(s.match, lr));
    if (idx >= 0) {
      this.used[idx]++;
      lr.step = idx;
    }
    return idx;
  }

  /** hold resolves when the scenario ends or the request's connection closes. */
  private hold(socket: Socket): Promise<void> {
    if (this.ended) return Promise.resolve();
    return new Promise((resolve) => {
      const done = () => {
        this.held.delete(done);
        resolve();
      };
      this.held.add(done);
      socket.once("close", done);
    });
  }

  /** waitForStep waits until step i answered a request (false: the scenario or the request ended first). */
  private async waitForStep(socket: Socket, i: number): Promise<boolean> {
    let gone = false;
    socket.once("close", () => (gone = true));
    for (;;) {
      if (i >= 0 && i < this.used.length && this.used[i] > 0) return true;
      if (this.ended || gone) return false;
      await new Promise((r) => setTimeout(r, 2));
    }
  }

  private async serve(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks);
    const lr = this.logged(req, raw);
    const idx = this.choose(lr);
    const socket = req.socket;
    if (idx < 0) {
      this.log.push(lr);
      await this.hold(socket);
      return endWith(res, 503);
    }
    const st = this.steps[idx];
    if (st.sealed) {
      const bad = checkSealed(raw, st.sealed);
      if (bad) lr.bad_body = bad;
    }
    if (st.after_step !== undefined && !(await this.waitForStep(socket, st.after_step))) {
      this.log.push(lr);
      return endWith(res, 503);
    }
    this.log.push(lr);
    if (!st.respond) {
      await this.hold(socket);
      return endWith(res, 503);
    }
    const a = st.respond;
    this.retryAfter(lr.path, a.headers);
    // An error body's retry_after_ms is the precise form of Retry-After
    // (docs/protocol.md, "Reconnect hints"): it wins.
    const ms = (a.body as { error?: { retry_after_ms?: number } } | undefined)?.error?.retry_after_ms ?? 0;
    if (ms > 0) this.notBefore.set(lr.path, Date.now() + ms);
    const headers: { [k: string]: string } = { ...(a.headers ?? {}) };
    if (a.body !== undefined) headers["Content-Type"] = "application/json";
    res.writeHead(a.status ?? 200, headers);
    res.end(a.body !== undefined ? this.bodyFor(a.body, lr) : undefined);
  }

  /**
   * bodyFor is an answer's body: {{base}} is the server's URL (the store's
   * URLs in upload answers), {{msg_id}} the msg_id of the request's body
   * (the answer to a send the app made, whose msg_id the SDK chose).
   */
  private bodyFor(body: unknown, lr: LoggedRequest): string {
    let out = JSON.stringify(body).replaceAll("{{base}}", this.url);
    const msgId = (lr.body as { msg_id?: unknown } | undefined)?.msg_id;
    if (typeof msgId === "string" && msgId !== "") out = out.replaceAll("{{msg_id}}", msgId);
    return out;
  }

  private retryAfter(path: string, headers?: { [k: string]: string }): void {
    for (const [k, v] of Object.entries(headers ?? {})) {
      if (k.toLowerCase() === "retry-after" && /^\d+$/.test(v)) this.notBefore.set(path, Date.now() + Number(v) * 1000);
    }
  }

  private async upgrade(req: http.IncomingMessage, socket: Socket, head: Buffer): Promise<void> {
    const lr = this.logged(req, Buffer.alloc(0));
    const idx = this.choose(lr);
    if (idx < 0) {
      this.log.push(lr);
      await this.hold(socket);
      return void socket.destroy();
    }
    const st = this.steps[idx];
    if (st.after_step !== undefined && !(await this.waitForStep(socket, st.after_step))) {
      this.log.push(lr);
      return void socket.destroy();
    }
    if (st.ws) {
      const script = st.ws;
      return this.wss.handleUpgrade(req, socket, head, (ws) => this.serveWS(ws, lr, script));
    }
    this.log.push(lr);
    if (!st.respond) {
      await this.hold(socket);
      return void socket.destroy();
    }
    const a = st.respond;
    this.retryAfter(lr.path, a.headers);
    const status = a.status ?? 200;
    const body = a.body !== undefined ? JSON.stringify(a.body) : "";
    let out = `HTTP/1.1 ${status} ${http.STATUS_CODES[status] ?? "Status"}\r\nConnection: close\r\nContent-Length: ${Buffer.byteLength(body)}\r\n`;
    for (const [k, v] of Object.entries(a.headers ?? {})) out += `${k}: ${v}\r\n`;
    if (body) out += "Content-Type: application/json\r\n";
    socket.end(out + "\r\n" + body);
  }

  /**
   * serveWS reads the hello (logged as the request's body), sends the step's
   * frames, then closes with the step's code or keeps the connection open,
   * logging the client's frames (pings aside) and answering them with replies.
   */
  private serveWS(ws: WebSocket, lr: LoggedRequest, script: WsScript): void {
    this.sockets.add(ws);
    ws.on("close", () => this.sockets.delete(ws));
    ws.on("error", () => undefined);
    const helloTimer = setTimeout(() => {
      this.log.push(lr);
      ws.terminate();
    }, 5000);
    const used = (script.replies ?? []).map(() => 0);
    let gotHello = false;
    ws.on("message", (data) => {
      const raw = (data as Buffer).toString("utf8"); // binaryType "nodebuffer" (the default): one Buffer a message
      if (!gotHello) {
        gotHello = true;
        clearTimeout(helloTimer);
        lr.body = parseJSON(raw);
        this.log.push(lr);
        this.afterHello(ws, lr, script);
        return;
      }
      const f = parseJSON(raw) as { type?: string } | undefined;
      if (!f || typeof f !== "object" || f.type === "ping") return;
      this.log.push({ method: "WS", path: lr.path, query: {}, body: f, step: lr.step });
      const replies = script.replies ?? [];
      for (let i = 0; i < replies.length; i++) {
        const rep = replies[i];
        if (used[i] >= Math.max(rep.times ?? 1, 1) || !subset(rep.match, f)) continue;
        used[i]++;
        for (const fr of rep.frames) ws.send(JSON.stringify(fr));
        break;
      }
    });
  }

  private afterHello(ws: WebSocket, lr: LoggedRequest, script: WsScript): void {
    let retryAfterMs = 0;
    for (const f of script.frames ?? []) {
      const p = f as { type?: string; retry_after_ms?: number };
      if (p.type === "error" && (p.retry_after_ms ?? 0) > 0) retryAfterMs = p.retry_after_ms!;
      ws.send(JSON.stringify(f));
    }
    if (script.close) {
      if (retryAfterMs > 0) this.notBefore.set(lr.path, Date.now() + retryAfterMs);
      ws.close(script.close.code, script.close.reason ?? "");
      setTimeout(() => ws.terminate(), 1000).unref();
    }
  }
}

function endWith(res: http.ServerResponse, status: number): void {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status);
  res.end();
}

function parseJSON(raw: string): unknown {
  try {
    return JSON.parse(raw);
  } catch {
    return raw;
  }
}

/** matches: the same method and path, each query and header of m ("*": present, "-": absent), m's body a subset. */
export function matches(m: Matcher, lr: LoggedRequest): boolean {
  if ((m.method && m.method !== lr.method) || m.path !== lr.path) return false;
  for (const [k, v] of Object.entries(m.query ?? {})) {
    const has = k in lr.query;
    if (v === "-" ? has : !has || (v !== "*" && v !== lr.query[k])) return false;
  }
  for (const [k, v] of Object.entries(m.headers ?? {})) {
    const got = Object.entries(lr.headers ?? {}).find(([h]) => h.toLowerCase() === k.toLowerCase());
    if (v === "-" ? got : !got || (v !== "*" && got[1] !== v)) return false;
  }
  if (m.body === undefined) return true;
  if (lr.body === undefined) return false;
  return subset(m.body, lr.body);
}

/** subset: every field of want is in got with the same value (objects recursively; arrays and scalars whole). */
export function subset(want: unknown, got: unknown): boolean {
  if (typeof want !== "object" || want === null || Array.isArray(want)) return JSON.stringify(want) === JSON.stringify(got);
  if (typeof got !== "object" || got === null || Array.isArray(got)) return false;
  const g = got as { [k: string]: unknown };
  return Object.entries(want as { [k: string]: unknown }).every(([k, v]) => k in g && subset(v, g[k]));
}

/** conformanceFile is the file of size bytes the scenarios upload: byte i is i*7 mod 251 (a prime: no period aligned with a chunk). */
export function conformanceFile(size: number): Uint8Array {
  const b = new Uint8Array(size);
  for (let i = 0; i < size; i++) b[i] = (i * 7) % 251;
  return b;
}

/**
 * checkSealed says why body is not the conformance file (or its part) that
 * want describes, sealed with want's key; "" when it is. It opens the chunks
 * as docs/protocol.md ("Attachments") states the format, with node:crypto,
 * not with the SDK's code: the scenarios check the SDKs against the document.
 */
export function checkSealed(body: Uint8Array, want: SealedBody): string {
  const chunk = 65536;
  const tag = 16;
  const key = Buffer.from(want.key, "base64url");
  if (key.length !== 32) return `the scenario's key is ${key.length} bytes`;
  const chunks = Math.max(Math.ceil(want.size / chunk), 1);
  let first = 0;
  let count = chunks;
  if (want.part) {
    const per = (want.part_size ?? 0) / chunk;
    first = (want.part - 1) * per;
    count = Math.min(per, chunks - first);
  }
  const from = first * chunk; // the plaintext it holds: from to to-1
  const to = Math.min(want.size, (first + count) * chunk);
  const n = to - from + count * tag;
  if (body.length !== n) return `${body.length} bytes, want ${n} (chunks ${first} to ${first + count - 1} sealed)`;
  const file = conformanceFile(want.size);
  for (let i = first; i < first + count; i++) {
    const nonce = Buffer.alloc(12);
    nonce.writeBigUInt64BE(BigInt(i), 4);
    const lo = i * chunk;
    const hi = Math.min(want.size, (i + 1) * chunk);
    const at = lo - from + (i - first) * tag;
    let plain: Buffer;
    try {
      const d = createDecipheriv("aes-256-gcm", key, nonce);
      d.setAAD(Buffer.from([i === chunks - 1 ? 1 : 0]));
      d.setAuthTag(body.subarray(at + (hi - lo), at + (hi - lo) + tag));
      plain = Buffer.concat([d.update(body.subarray(at, at + (hi - lo))), d.final()]);
    } catch {
      return `chunk ${i - first} does not open with the key as chunk ${i} of ${chunks}`;
    }
    if (!plain.equals(file.subarray(lo, hi))) return `chunk ${i} opens to other bytes than the file's ${lo} to ${hi - 1}`;
  }
  return "";
}
