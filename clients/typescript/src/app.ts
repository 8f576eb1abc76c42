// The app's calls beside the sync loop (docs/client.md, "Conversations",
// "Changing a message", "Typing and presence"): the conversation list,
// history, members, read positions, receipts, presence, settings and the
// changes of a message. Each is one HTTP call (or a page loop) through Api;
// changes are retried with their change_id while the failure is temporary.
import type { Api } from "./api.js";
import { Backoff, jitterUp, sleep } from "./backoff.js";
import { ApiError } from "./errors.js";
import type { History, Message, Record } from "./protocol.js";

/** Member is a member of a conversation and the seq at which they joined. */
export interface Member {
  user_id: number;
  joined_seq: number;
  /** role is "owner", "admin", "moderator" or "member" (docs/protocol.md, "Roles"). */
  role: string;
}

/** Receipt is how far a member who shows receipts has read a conversation. */
export interface Receipt {
  user_id: number;
  read_seq: number;
}

/** ReceiptEvent: another current member of a conversation read up to read_seq (the `receipt` frame). */
export interface ReceiptEvent {
  conversation_id: number;
  user_id: number;
  read_seq: number;
}

/** TypingEvent: another member types (show it for expires_in_ms unless a newer one comes), or stopped. */
export interface TypingEvent {
  conversation_id: number;
  user_id: number;
  stop: boolean;
  expires_in_ms: number;
}

/** Presence: a user's presence as the caller may see it; last_seen absent when unknown or hidden. */
export interface Presence {
  user_id: number;
  online: boolean;
  last_seen?: string;
}

/** Settings are the user's privacy and notification settings. */
export interface Settings {
  hide_receipts: boolean;
  hide_presence: boolean;
  notifications: boolean;
}

/** SettingsPatch changes the settings it names and keeps the others. */
export type SettingsPatch = Partial<Settings>;

/** ChangeKind is what a {@link Change} does to a message. */
export type ChangeKind = "edit" | "delete" | "react" | "unreact";

/** Change is one change of a message; changeId is its idempotency key (made when absent). */
export interface Change {
  kind: ChangeKind;
  conversationId: number;
  seq: number;
  changeId?: string;
  /** body: the new body of an edit. */
  body?: string;
  /** emoji: the reaction of a react. */
  emoji?: string;
}

/**
 * ChangeResult: the message after the change as the user sees it, or
 * pending (in the log, not yet projected: its update entry will come, or
 * apply the same change, with its changeId, again).
 */
export interface ChangeResult {
  change: Change & { changeId: string };
  message?: Message;
  pending: boolean;
}

/** ChangeOptions bound how long a change is retried. */
export interface ChangeOptions {
  /** signal: aborting it ends the retries (the last error rejects). */
  signal?: AbortSignal;
  /**
   * timeoutMs bounds the retries of a temporary failure; then the last error
   * rejects.
   *
   * @defaultValue 30000
   */
  timeoutMs?: number;
}

/**
 * ConversationSettings are what updateConversation changes
 * (docs/protocol.md, "Frozen and slow mode"); those absent do not change.
 */
export interface ConversationSettings {
  /** title: the new title, 1..256 bytes. */
  title?: string;
  /** frozen: freeze (true: only admins and the owner write) or unfreeze. */
  frozen?: boolean;
  /** slow_mode: seconds a member below moderator waits between its sends; 0 off. */
  slow_mode?: number;
}

const seg = (n: number) => String(Math.trunc(n));

/** listAll reads every page of a paged list. */
async function listAll<T>(api: Api, path: string, key: string, signal?: AbortSignal): Promise<T[]> {
  const out: T[] = [];
  let page: string | null = "";
  while (page !== null) {
    const sep = path.includes("?") ? "&" : "?";
    const q: string = page ? `${path}${sep}page=${encodeURIComponent(page)}` : path;
    const res = await api.request("GET", q, undefined, signal);
    const body = (await res.json()) as { next_page: string | null } & { [k: string]: unknown };
    out.push(...((body[key] as T[] | undefined) ?? []));
    page = body.next_page ?? null;
  }
  return out;
}

/**
 * conversations reads the whole list; a conversation seen on two pages (it moved meanwhile) keeps its newest record.
 *
 * @internal
 */
export async function conversations(api: Api, signal?: AbortSignal): Promise<Record[]> {
  const all = await listAll<Record>(api, "/v1/conversations", "conversations", signal);
  const latest = new Map<number, Record>();
  for (const r of all) {
    const had = latest.get(r.conversation_id);
    if (!had || r.version > had.version) latest.set(r.conversation_id, r);
  }
  return [...latest.values()];
}

/** @internal */
export function history(api: Api, cid: number, before: number, limit: number, signal?: AbortSignal): Promise<History> {
  return api.history(cid, before, limit, signal);
}

/** @internal */
export function members(api: Api, cid: number, signal?: AbortSignal): Promise<Member[]> {
  return listAll<Member>(api, `/v1/conversations/${seg(cid)}/members`, "members", signal);
}

/** @internal */
export function receipts(api: Api, cid: number, signal?: AbortSignal): Promise<Receipt[]> {
  return listAll<Receipt>(api, `/v1/conversations/${seg(cid)}/receipts`, "receipts", signal);
}

/** @internal */
export async function addMember(api: Api, cid: number, userId: number, signal?: AbortSignal): Promise<void> {
  await drain(api.request("POST", `/v1/conversations/${seg(cid)}/members`, { user_id: userId }, signal));
}

/** @internal */
export async function removeMember(api: Api, cid: number, userId: number, signal?: AbortSignal): Promise<void> {
  await drain(api.request("DELETE", `/v1/conversations/${seg(cid)}/members/${seg(userId)}`, undefined, signal));
}

/**
 * setRole gives a member a role, retried with one change_id while the
 * failure is temporary, as applyChange retries a change.
 *
 * @internal
 */
export async function setRole(api: Api, cid: number, userId: number, role: string, opts: ChangeOptions,
  backoff: { initialMs: number; maxMs: number }): Promise<void> {
  if (!(cid > 0) || !(userId > 0) || !role) throw new Error(`inboxd: bad role ${role} of user ${userId} in ${cid}`);
  const body = { role, change_id: crypto.randomUUID() };
  await keyedChange(api, "PUT", `/v1/conversations/${seg(cid)}/members/${seg(userId)}/role`, body, opts, backoff);
}

/**
 * updateConversation renames, freezes or unfreezes, or sets the slow mode
 * of a conversation (docs/protocol.md, "Frozen and slow mode"), retried
 * with one change_id as setRole is.
 *
 * @internal
 */
export async function updateConversation(api: Api, cid: number, settings: ConversationSettings, opts: ChangeOptions,
  backoff: { initialMs: number; maxMs: number }): Promise<void> {
  if (!(cid > 0) || (settings.title === undefined && settings.frozen === undefined && settings.slow_mode === undefined)) {
    throw new Error(`inboxd: no setting to change in conversation ${cid}`);
  }
  const body = { ...settings, change_id: crypto.randomUUID() };
  await keyedChange(api, "PATCH", `/v1/conversations/${seg(cid)}`, body, opts, backoff);
}

/**
 * keyedChange sends body, which carries a change_id made once, and retries
 * it unchanged while the failure is temporary (up to opts.timeoutMs), so
 * that a lost answer never applies the change twice; a lift (DELETE, no
 * body) changes nothing twice.
 */
async function keyedChange(api: Api, method: string, path: string, body: object | undefined, opts: ChangeOptions,
  backoff: { initialMs: number; maxMs: number }): Promise<void> {
  const deadline = Date.now() + (opts.timeoutMs ?? 30000);
  const b = new Backoff(backoff);
  for (;;) {
    try {
      await drain(api.request(method, path, body, opts.signal));
      return;
    } catch (err) {
      const temporary = !(err instanceof ApiError) || err.retryable;
      const wait = err instanceof ApiError && err.retryAfterMs !== undefined ? jitterUp(err.retryAfterMs, 0.2) : b.next();
      if (!temporary || opts.signal?.aborted || Date.now() + wait > deadline) throw err;
      await sleep(wait, opts.signal);
    }
  }
}

/** Sanction is a ban or mute that stands: until absent, until lifted; by 0, a service. */
export interface Sanction {
  user_id: number;
  until?: string;
  by: number;
  at: string;
}

/**
 * sanction sets (PUT, until optional) or lifts (DELETE) a ban or mute
 * (kind "bans" or "mutes"), retried as setRole is.
 *
 * @internal
 */
export async function sanction(api: Api, method: "PUT" | "DELETE", kind: "bans" | "mutes", cid: number, userId: number,
  until: Date | undefined, opts: ChangeOptions, backoff: { initialMs: number; maxMs: number }): Promise<void> {
  if (!(cid > 0) || !(userId > 0)) throw new Error(`inboxd: bad ${kind} of user ${userId} in ${cid}`);
  const body = method === "PUT" ? { change_id: crypto.randomUUID(), ...(until ? { until: until.toISOString() } : {}) } : undefined;
  await keyedChange(api, method, `/v1/conversations/${seg(cid)}/${kind}/${seg(userId)}`, body, opts, backoff);
}

/** @internal */
export function sanctions(api: Api, kind: "bans" | "mutes", cid: number, signal?: AbortSignal): Promise<Sanction[]> {
  return listAll<Sanction>(api, `/v1/conversations/${seg(cid)}/${kind}`, "sanctions", signal);
}

/** @internal */
export async function markRead(api: Api, cid: number, seq: number, signal?: AbortSignal): Promise<void> {
  await drain(api.request("POST", `/v1/conversations/${seg(cid)}/read`, { seq }, signal));
}

/** @internal */
export async function setRecord(api: Api, cid: number, p: { pinned?: boolean; muted?: boolean }, signal?: AbortSignal): Promise<void> {
  await drain(api.request("PATCH", `/v1/conversations/${seg(cid)}/record`, p, signal));
}

/** @internal */
export async function presence(api: Api, userIds: number[], signal?: AbortSignal): Promise<Presence[]> {
  const q = new URLSearchParams();
  for (const id of userIds) q.append("user_id", seg(id));
  const res = await api.request("GET", `/v1/presence?${q}`, undefined, signal);
  return ((await res.json()) as { presence: Presence[] }).presence;
}

/** @internal */
export async function settings(api: Api, patch?: SettingsPatch, signal?: AbortSignal): Promise<Settings> {
  const res = await api.request(patch ? "PATCH" : "GET", "/v1/settings", patch, signal);
  return (await res.json()) as Settings;
}

async function drain(p: Promise<Response>): Promise<void> {
  await (await p).body?.cancel();
}

function changeRequest(ch: Change & { changeId: string }): [string, string, object] {
  const path = `/v1/conversations/${seg(ch.conversationId)}/messages/${seg(ch.seq)}`;
  switch (ch.kind) {
    case "edit":
      return ["PATCH", path, { change_id: ch.changeId, body: ch.body }];
    case "delete":
      return ["DELETE", path, { change_id: ch.changeId }];
    case "react":
      return ["PUT", path + "/reaction", { change_id: ch.changeId, emoji: ch.emoji }];
    case "unreact":
      return ["DELETE", path + "/reaction", { change_id: ch.changeId }];
  }
}

function checkChange(ch: Change): void {
  if (!(ch.conversationId > 0) || !(ch.seq > 0)) throw new TypeError(`inboxd: bad message ${ch.conversationId}/${ch.seq}`);
  if (!["edit", "delete", "react", "unreact"].includes(ch.kind)) throw new TypeError(`inboxd: unknown change ${ch.kind}`);
  if (ch.kind === "edit" && !ch.body) throw new TypeError("inboxd: empty message body");
  if (ch.kind === "react" && !ch.emoji) throw new TypeError("inboxd: empty emoji");
}

/**
 * applyChange makes a change and returns the message after it, or pending.
 * A network error, a timeout, 408, 429 and 5xx are retried with the same
 * change_id (Retry-After, else full-jitter backoff) until the timeout or
 * the signal; a refusal (403, 404, 400, 413) rejects with its ApiError.
 *
 * @internal
 */
export async function applyChange(api: Api, change: Change, backoff: { initialMs: number; maxMs: number },
  opts: ChangeOptions = {}): Promise<ChangeResult> {
  checkChange(change);
  const ch = { ...change, changeId: change.changeId || crypto.randomUUID() };
  const [method, path, body] = changeRequest(ch);
  const deadline = Date.now() + (opts.timeoutMs ?? 30000);
  const b = new Backoff(backoff);
  for (;;) {
    try {
      const res = await api.request(method, path, body, opts.signal);
      const m = (await res.json()) as Message;
      const pending = res.status === 202 || !m.seq;
      return { change: ch, message: pending ? undefined : m, pending };
    } catch (err) {
      const temporary = !(err instanceof ApiError) || err.retryable;
      const wait = err instanceof ApiError && err.retryAfterMs !== undefined ? jitterUp(err.retryAfterMs, 0.2) : b.next();
      if (!temporary || opts.signal?.aborted || Date.now() + wait > deadline) throw err;
      await sleep(wait, opts.signal);
    }
  }
}

/** ReportOptions says why a message is reported (docs/protocol.md, "Reports"). */
export interface ReportOptions extends ChangeOptions {
  /** reason is one of "spam", "harassment", "hate", "violence", "sexual", "self_harm", "illegal", "other". */
  reason: string;
  /** note is for the moderators, at most 1000 bytes. */
  note?: string;
  /** reportId is the report's idempotency key; made when absent. */
  reportId?: string;
}

/** Report is a report as its reporter sees it. */
export interface Report {
  report_id: string;
  conversation_id: number;
  seq: number;
  reason: string;
  note: string;
  created_at: string;
}

/** ReportResult is the report as the server took it, or pending (appended, not projected yet: report again with the same reportId). */
export interface ReportResult {
  reportId: string;
  report?: Report;
  pending: boolean;
}

/**
 * reportMessage reports a message to the moderators, retried with the same
 * report id while the failure is temporary, as applyChange retries a change.
 *
 * @internal
 */
export async function reportMessage(api: Api, conversationId: number, seq: number, opts: ReportOptions,
  backoff: { initialMs: number; maxMs: number }): Promise<ReportResult> {
  if (!(conversationId > 0) || !(seq > 0)) throw new Error(`inboxd: bad message ${conversationId}/${seq}`);
  if (!opts.reason) throw new Error("inboxd: a report needs a reason");
  const reportId = opts.reportId || crypto.randomUUID();
  const body = { report_id: reportId, reason: opts.reason, ...(opts.note ? { note: opts.note } : {}) };
  const path = `/v1/conversations/${conversationId}/messages/${seq}/report`;
  const deadline = Date.now() + (opts.timeoutMs ?? 30000);
  const b = new Backoff(backoff);
  for (;;) {
    try {
      const res = await api.request("POST", path, body, opts.signal);
      const r = (await res.json()) as Report;
      const pending = res.status === 202 || !r.seq;
      return { reportId, report: pending ? undefined : r, pending };
    } catch (err) {
      const temporary = !(err instanceof ApiError) || err.retryable;
      const wait = err instanceof ApiError && err.retryAfterMs !== undefined ? jitterUp(err.retryAfterMs, 0.2) : b.next();
      if (!temporary || opts.signal?.aborted || Date.now() + wait > deadline) throw err;
      await sleep(wait, opts.signal);
    }
  }
}

/** Block is a user the user blocks (docs/protocol.md, "Blocks"), since at. */
export interface Block {
  user_id: number;
  at: string;
}

/** @internal */
export async function block(api: Api, userId: number, on: boolean, signal?: AbortSignal): Promise<void> {
  if (!(userId > 0)) throw new Error(`inboxd: bad user id ${userId}`);
  await drain(api.request(on ? "PUT" : "DELETE", `/v1/blocks/${seg(userId)}`, undefined, signal));
}

/** @internal */
export function blocks(api: Api, signal?: AbortSignal): Promise<Block[]> {
  return listAll<Block>(api, "/v1/blocks?limit=1000", "blocks", signal);
}

/** SearchOrder is the order of a search's results: newest first, or by rank (ties newest first). */
export type SearchOrder = "newest" | "relevance";

/**
 * SearchQuery is a search (docs/protocol.md, "GET /v1/search"). Only q is
 * required; every other field absent is no filter.
 */
export interface SearchQuery {
  /**
   * q is what to find (1..256 bytes): words and `"quoted phrases"` whose words follow each other; every term must
   * match. The last word is a prefix ("hel" finds "hello") unless q ends with a space or a quote, or prefix is false.
   */
  q: string;
  /** prefix: false makes the last word of q a whole word. @defaultValue true */
  prefix?: boolean;
  /** conversationId: only this conversation. */
  conversationId?: number;
  /** senderId: only this sender's messages (0: the server API's named system sender). */
  senderId?: number;
  /** after: messages sent strictly after this time (a Date, or an RFC 3339 string sent as it is). */
  after?: Date | string;
  /** before: messages sent strictly before this time. */
  before?: Date | string;
  /** afterSeq: seqs strictly above this one; with conversationId only (the server refuses it without). */
  afterSeq?: number;
  /** beforeSeq: seqs strictly below this one; with conversationId only. */
  beforeSeq?: number;
  /** hasAttachment: true only messages with attachments, false only messages without; absent both. */
  hasAttachment?: boolean;
  /** mentionsMe: only messages that mention the user (by id or with mention_all). */
  mentionsMe?: boolean;
  /** order of the results. @defaultValue "newest" */
  order?: SearchOrder;
  /** limit: the page's size, 1..100. @defaultValue 20 */
  limit?: number;
  /** cursor: a page's next_cursor, for the page after it (the other fields those of that page's query). */
  cursor?: string;
}

/** SnippetPart is a segment of a result's snippet: plain text, never markup; match marks the words the query matched. */
export interface SnippetPart {
  text: string;
  match?: boolean;
}

/** SearchResult is one message a search found, as history serves it, with a snippet of its body and its rank (ts_rank). */
export interface SearchResult {
  message: Message;
  snippet: SnippetPart[];
  rank: number;
}

/**
 * SearchPage is a page of a search's results. next_cursor is present when
 * more may follow (the cursor of the next page's query); estimated_total is
 * on the first page only (no cursor): how many messages matched when that
 * page was read.
 */
export interface SearchPage {
  results: SearchResult[];
  next_cursor?: string;
  estimated_total?: number;
}

/** searchParams is a query as the parameters of GET /v1/search. */
function searchParams(s: SearchQuery): URLSearchParams {
  const q = new URLSearchParams({ q: s.q });
  const time = (t: Date | string) => (typeof t === "string" ? t : t.toISOString());
  if (s.prefix === false) q.set("prefix", "false");
  if (s.conversationId !== undefined) q.set("conversation_id", seg(s.conversationId));
  if (s.senderId !== undefined) q.set("sender_id", seg(s.senderId));
  if (s.after !== undefined) q.set("after", time(s.after));
  if (s.before !== undefined) q.set("before", time(s.before));
  if (s.afterSeq !== undefined) q.set("after_seq", seg(s.afterSeq));
  if (s.beforeSeq !== undefined) q.set("before_seq", seg(s.beforeSeq));
  if (s.hasAttachment !== undefined) q.set("has_attachment", String(s.hasAttachment));
  if (s.mentionsMe) q.set("mentions_me", "true");
  if (s.order !== undefined) q.set("order", s.order);
  if (s.limit !== undefined) q.set("limit", seg(s.limit));
  if (s.cursor) q.set("cursor", s.cursor);
  return q;
}

/** @internal */
export async function search(api: Api, s: SearchQuery, signal?: AbortSignal): Promise<SearchPage> {
  if (!s.q.trim()) throw new TypeError("inboxd: a search needs a word");
  const res = await api.request("GET", `/v1/search?${searchParams(s)}`, undefined, signal);
  const page = (await res.json()) as SearchPage;
  return { ...page, results: page.results ?? [] };
}

/** @internal */
export async function* searchPages(api: Api, s: SearchQuery, signal?: AbortSignal): AsyncGenerator<SearchPage, void, undefined> {
  let query = s;
  for (;;) {
    const page = await search(api, query, signal);
    yield page;
    if (!page.next_cursor) return;
    query = { ...query, cursor: page.next_cursor };
  }
}
