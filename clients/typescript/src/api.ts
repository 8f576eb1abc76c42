// The HTTP side of the protocol over fetch: one function per endpoint the
// client uses, the error shape decoded in one place.
import { parseRetryAfter } from "./backoff.js";
import { ApiError } from "./errors.js";
import type { AttachmentURL, ConversationList, DevToken, ErrorBody, History, Message, SendMessage, SendPending, SyncAnswer, Upload } from "./protocol.js";

/** FetchLike is the part of `fetch` the client uses (the global one, or a test's). */
export type FetchLike = (input: string, init?: RequestInit) => Promise<Response>;

/** TokenSource returns the bearer token; refresh is true after a 401 (ask the identity provider again). */
export type TokenSource = (refresh: boolean) => Promise<string> | string;

/** @internal */
export interface ApiConfig {
  baseUrl: string;
  token: TokenSource;
  /** staticToken: the token is a fixed string (no source to ask again): a 401 is final at once (docs/client.md). */
  staticToken?: boolean;
  fetch?: FetchLike;
  requestTimeoutMs?: number; // default 15000; a long-poll adds its wait
}

/** @internal */
export interface SyncParams {
  after: number;
  epoch?: number;
  limit?: number;
  waitSec?: number;
  etag?: string;
}

/** @internal */
export interface SyncResult {
  answer?: SyncAnswer; // undefined on 304
  etag?: string;
}

/** @internal */
export type SendOutcome = { message: Message } | { pending: true };

/**
 * Api makes the client's HTTP requests. A 401 asks the token source again
 * once (refresh; not for a static token) and repeats the request; a second 401 is an ApiError for
 * the caller to classify. Network failures reject with the fetch error.
 *
 * @internal
 */
export class Api {
  private readonly fetch: FetchLike;
  private readonly timeoutMs: number;
  private token: string | undefined;

  constructor(private readonly cfg: ApiConfig) {
    this.fetch = cfg.fetch ?? ((i, init) => globalThis.fetch(i, init));
    this.timeoutMs = cfg.requestTimeoutMs ?? 15000;
  }

  get baseUrl(): string {
    return this.cfg.baseUrl.replace(/\/+$/, "");
  }

  /** bearer returns the current token (asking the source the first time). */
  async bearer(): Promise<string> {
    this.token ??= await this.cfg.token(false);
    return this.token;
  }

  async sync(p: SyncParams, signal?: AbortSignal): Promise<SyncResult> {
    const q = new URLSearchParams({ after: String(p.after) });
    if (p.epoch) q.set("epoch", String(p.epoch));
    if (p.limit) q.set("limit", String(p.limit));
    if (p.waitSec) q.set("wait", String(p.waitSec));
    const headers: Record<string, string> = {};
    if (p.etag) headers["If-None-Match"] = p.etag;
    const res = await this.request("GET", `/v1/sync?${q}`, undefined, signal, (p.waitSec ?? 0) * 1000, headers);
    if (res.status === 304) return { etag: p.etag };
    return { answer: (await res.json()) as SyncAnswer, etag: res.headers.get("ETag") ?? undefined };
  }

  async conversations(page: string, signal?: AbortSignal): Promise<ConversationList> {
    const res = await this.request("GET", `/v1/conversations?page=${encodeURIComponent(page)}`, undefined, signal);
    return (await res.json()) as ConversationList;
  }

  async history(cid: number, before: number, limit: number, signal?: AbortSignal): Promise<History> {
    const q = new URLSearchParams({ limit: String(limit) });
    if (before > 0) q.set("before", String(before)); // 0: the newest
    const res = await this.request("GET", `/v1/conversations/${cid}/messages?${q}`, undefined, signal);
    return (await res.json()) as History;
  }

  /** historyAfter reads messages with seq > after, ascending (has_more: newer ones exist). */
  async historyAfter(cid: number, after: number, limit: number, signal?: AbortSignal): Promise<History> {
    const q = new URLSearchParams({ after: String(after), limit: String(limit) });
    const res = await this.request("GET", `/v1/conversations/${cid}/messages?${q}`, undefined, signal);
    return (await res.json()) as History;
  }

  /** historyChanged reads the messages changed after a change count, in change order (changed_ord). */
  async historyChanged(cid: number, changedAfter: number, limit: number, signal?: AbortSignal): Promise<History> {
    const q = new URLSearchParams({ changed_after: String(changedAfter), limit: String(limit) });
    const res = await this.request("GET", `/v1/conversations/${cid}/messages?${q}`, undefined, signal);
    return (await res.json()) as History;
  }

  /** send posts a message: 200/201 give the message, 202 says it is in the log without a seq yet. */
  async send(cid: number, m: SendMessage, signal?: AbortSignal): Promise<SendOutcome> {
    const res = await this.request("POST", `/v1/conversations/${cid}/messages`, m, signal);
    const body = (await res.json()) as Message | SendPending;
    if (res.status === 202) return { pending: true };
    return { message: body as Message };
  }

  /** createUpload asks for an upload (docs/protocol.md, "Attachments"). */
  async createUpload(cid: number,
    req: { name: string; content_type: string; size: number; sha256?: string; width?: number; height?: number; multipart?: boolean },
    signal?: AbortSignal): Promise<Upload> {
    const res = await this.request("POST", `/v1/conversations/${cid}/uploads`, req, signal);
    return (await res.json()) as Upload;
  }

  /** getUpload reads an upload of the user's again: its state, and while open fresh URLs (the parts still missing). */
  async getUpload(cid: number, id: string, signal?: AbortSignal): Promise<Upload> {
    const res = await this.request("GET", `/v1/conversations/${cid}/uploads/${encodeURIComponent(id)}`, undefined, signal);
    return (await res.json()) as Upload;
  }

  /** completeUpload has the store join a multipart upload's parts (400 while some are missing); done again, it answers the upload as it is. */
  async completeUpload(cid: number, id: string, signal?: AbortSignal): Promise<Upload> {
    const res = await this.request("POST", `/v1/conversations/${cid}/uploads/${encodeURIComponent(id)}/complete`, undefined, signal);
    return (await res.json()) as Upload;
  }

  /** attachmentUrl asks for the presigned URL of an attachment (or of its thumbnail). */
  async attachmentUrl(cid: number, id: string, thumbnail: boolean, signal?: AbortSignal): Promise<AttachmentURL> {
    const q = new URLSearchParams({ redirect: "false" });
    if (thumbnail) q.set("thumbnail", "true");
    const res = await this.request("GET", `/v1/conversations/${cid}/attachments/${encodeURIComponent(id)}?${q}`, undefined, signal);
    return (await res.json()) as AttachmentURL;
  }

  /** raw is a request to the object store (a presigned URL: no token). */
  raw(url: string, init: RequestInit): Promise<Response> {
    return this.fetch(url, init);
  }

  async createConversation(title: string, members: number[], signal?: AbortSignal): Promise<number> {
    const res = await this.request("POST", "/v1/conversations", { title, members }, signal);
    return ((await res.json()) as { conversation_id: number }).conversation_id;
  }

  /** request sends one request with the bearer token and turns a non-2xx answer into an ApiError. */
  async request(method: string, path: string, body: unknown, signal?: AbortSignal, extraMs = 0,
    headers: Record<string, string> = {}): Promise<Response> {
    for (let refreshed = false; ; refreshed = true) {
      const res = await this.once(method, path, body, signal, extraMs, headers);
      if (res.status === 401 && !refreshed && !this.cfg.staticToken) {
        await res.body?.cancel();
        this.token = await this.cfg.token(true);
        continue;
      }
      if (res.ok || res.status === 304) return res;
      throw await toApiError(res);
    }
  }

  private async once(method: string, path: string, body: unknown, signal: AbortSignal | undefined,
    extraMs: number, headers: Record<string, string>): Promise<Response> {
    const timeout = AbortSignal.timeout(this.timeoutMs + extraMs);
    const sig = signal ? AbortSignal.any([signal, timeout]) : timeout;
    const h: Record<string, string> = { ...headers, Authorization: `Bearer ${await this.bearer()}` };
    if (body !== undefined) h["Content-Type"] = "application/json";
    return this.fetch(this.baseUrl + path, {
      method, headers: h, signal: sig, body: body === undefined ? undefined : JSON.stringify(body),
    });
  }
}

/**
 * toApiError decodes the protocol's error shape; Retry-After (or, on a 429, X-RateLimit-Reset) becomes retryAfterMs.
 *
 * @internal
 */
export async function toApiError(res: Response): Promise<ApiError> {
  let code = "http_" + res.status;
  let message = res.statusText;
  let retryable = res.status === 408 || res.status === 429 || res.status >= 500;
  let hintMs = 0;
  try {
    const b = (await res.json()) as ErrorBody;
    if (b?.error?.code) {
      code = b.error.code;
      message = b.error.message;
      retryable = b.error.retryable || retryable;
      hintMs = b.error.retry_after_ms ?? 0;
    }
  } catch {
    // not the error shape (a proxy's page): keep the status
  }
  let after = parseRetryAfter(res.headers.get("Retry-After"));
  const reset = res.headers.get("X-RateLimit-Reset");
  if (after === undefined && res.status === 429 && reset && /^\d+$/.test(reset)) {
    after = Math.max(0, Number(reset) * 1000 - Date.now());
  }
  if (hintMs > 0) return new ApiError(res.status, code, message, retryable, hintMs, true);
  return new ApiError(res.status, code, message, retryable, after);
}

/** devToken asks a dev-mode gateway (inboxd dev) for a user's token: POST /v1/dev/token. */
export async function devToken(baseUrl: string, userId: number, fetchFn: FetchLike = globalThis.fetch): Promise<string> {
  const res = await fetchFn(baseUrl.replace(/\/+$/, "") + "/v1/dev/token", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify({ user_id: userId }),
  });
  if (!res.ok) throw await toApiError(res);
  return ((await res.json()) as DevToken).token;
}
