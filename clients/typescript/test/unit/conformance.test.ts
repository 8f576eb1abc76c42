// The conformance scenarios shared with the Go SDK (clients/conformance/README.md):
// the twin of client/conformance_test.go. Each scenario file is one subtest: a
// fake gateway follows its script, the client runs on a MemoryStore seeded from
// `start` with its waits shrunk, and the requests it made and the state it ended
// with are compared with `expect`. CONFORMANCE_LOG=1 prints every request log.
import { test } from "node:test";
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { WebSocket as NodeWebSocket } from "ws";
import { Client, type ClientConfig, type Transport } from "../../src/client.js";
import { ApiError, HandlerError, PermanentError, UploadError } from "../../src/errors.js";
import type { TooLong } from "../../src/inbox.js";
import type { SearchPage, SearchQuery } from "../../src/app.js";
import type { Message, Upload } from "../../src/protocol.js";
import type { SendResult } from "../../src/outbox.js";
import { emptyState, MemoryStore, type Hole, type State } from "../../src/store.js";
import type { WebSocketCtor } from "../../src/transport_ws.js";
import { conformanceFile, matches, ScriptServer, subset, type LoggedRequest, type Matcher, type Step } from "./conformance_server.js";

// dist/test/unit → the repository's clients/conformance/scenarios.
const scenarioDir = join(dirname(fileURLToPath(import.meta.url)), "../../../../conformance/scenarios");

/** scenarioDeadlineMs bounds one scenario; a failure bound, never an expectation. */
const scenarioDeadlineMs = 10_000;

/**
 * Divergences of the TypeScript SDK from a scenario (the scenario being right
 * per docs/client.md and docs/protocol.md): the subtest runs as a todo.
 */
const divergences: { [name: string]: string } = {
};

interface Scenario {
  name: string;
  checks: string;
  transport?: string;
  config?: { ws_fallback_after?: number };
  start: { epoch: number; cursor: number; conversations?: { [cid: string]: ConversationInit };
    outbox?: { msg_id: string; conversation_id: number; body: string }[] };
  handler?: { fail_once?: number[] };
  /** actions: the app's calls (uploads, sends, searches), made one after the other on the first client while it runs. */
  actions?: Action[];
  script: Step[];
  expect: Expectation;
}

/** Action is one call of the app's: exactly one of upload, send and search, and what it must end with. */
interface Action {
  /** upload: the conformance file of size bytes (conformanceFile), or a resume of upload resume_id with it. */
  upload?: { conversation_id: number; name: string; content_type: string; size: number; resume_id?: string };
  send?: { conversation_id: number; body: string; attachments?: string[] };
  /** search: a search in the wire's names; with all_pages, every page of it (searchPages). */
  search?: SearchAction;
  /** expect: exactly one field. */
  expect: {
    /** upload: the call resolved with an upload of which this is a subset. */
    upload?: object;
    /** error: the call failed with the ApiError of this status, and no upload to resume (not an UploadError). */
    error?: { status: number };
    /** upload_error: the upload failed after the server made it; the UploadError carries its id. */
    upload_error?: { id: string };
    /** sent: the send ended with this message: its seq and its attachments' ids, in order. */
    sent?: { seq: number; attachments?: string[] };
    /** found: the search ended with these results. */
    found?: SearchFound;
  };
}

interface SearchAction {
  q: string;
  prefix?: boolean;
  conversation_id?: number;
  sender_id?: number;
  after?: string;
  before?: string;
  after_seq?: number;
  before_seq?: number;
  has_attachment?: boolean;
  mentions_me?: boolean;
  order?: "newest" | "relevance";
  limit?: number;
  cursor?: string;
  all_pages?: boolean;
}

/**
 * SearchFound is what a search found: its results as [conversation_id, seq], in order (every page's, with all_pages),
 * the last page's next_cursor, the first page's estimated_total and how many pages were read.
 */
interface SearchFound {
  results: [number, number][];
  next_cursor?: string;
  estimated_total?: number;
  pages: number;
}

/** search makes the search s (every page with all_pages) and returns what it found. */
async function search(c: Client, s: SearchAction): Promise<SearchFound> {
  const q: SearchQuery = {
    q: s.q, prefix: s.prefix, conversationId: s.conversation_id, senderId: s.sender_id, after: s.after, before: s.before,
    afterSeq: s.after_seq, beforeSeq: s.before_seq, hasAttachment: s.has_attachment, mentionsMe: s.mentions_me,
    order: s.order, limit: s.limit, cursor: s.cursor,
  };
  const found: SearchFound = { results: [], pages: 0 };
  const add = (p: SearchPage) => {
    for (const r of p.results) found.results.push([r.message.conversation_id, r.message.seq]);
    if (found.pages === 0) found.estimated_total = p.estimated_total;
    found.next_cursor = p.next_cursor;
    found.pages++;
  };
  if (!s.all_pages) add(await c.search(q));
  else for await (const p of c.searchPages(q)) add(p);
  return found;
}

/** ActionResult is how one of the app's calls ended. */
interface ActionResult {
  upload?: Upload;
  sent?: SendResult;
  found?: SearchFound;
  error?: unknown;
}

interface ConversationInit {
  last_seq: number;
  large?: boolean;
  change_count?: number;
}

interface ExpectedRequest extends Matcher {
  times?: number;
  min_times?: number;
  max_times?: number;
}

type Holes = { [cid: string]: [number, number][] };

interface Expectation {
  requests?: ExpectedRequest[];
  entries?: number[];
  cursor: number;
  epoch: number;
  outbox?: string[];
  sent?: { [msgId: string]: number };
  send_errors?: { [msgId: string]: number };
  too_long?: { epoch: number; head: number; new_holes?: Holes }[];
  holes?: Holes;
  permanent?: { status?: number; close_code?: number };
  handler_errors?: number;
  updates?: [number, number, number][];
  /** large_messages: messages handed to onEntry with inbox_seq 0 (read-mode conversations), as [conversation_id, seq]. */
  large_messages?: [number, number][];
  /** conversations: when present, the state of these conversations at the end. */
  conversations?: { [cid: string]: ConversationInit };
  /** handed: when present, everything onEntry accepted, in order, as [inbox_seq, conversation_id, message seq or 0]. */
  handed?: [number, number, number][];
}

class AppRefused extends Error {}

/** Observed is what the app saw. */
class Observed {
  entries: number[] = [];
  tooLongs: TooLong[] = [];
  results = new Map<string, SendResult>();
  handlerErrors = 0;
  updates: [number, number, number][] = [];
  largeMessages: [number, number][] = [];
  handed: [number, number, number][] = [];
  /** actions: how the app's calls ended, in order; appSends: the msg_ids of the sends they made. */
  actions: ActionResult[] = [];
  appSends = new Set<string>();
  private readonly failed = new Set<number>();
  constructor(private readonly failOnce: number[]) {}

  handlers() {
    return {
      onEntry: (e: { inbox_seq: number; conversation_id: number; message?: Message }) => {
        if (e.inbox_seq === 0 && e.message) {
          this.largeMessages.push([e.conversation_id, e.message.seq]);
          this.handed.push([0, e.conversation_id, e.message.seq]);
          return;
        }
        if (this.failOnce.includes(e.inbox_seq) && !this.failed.has(e.inbox_seq)) {
          this.failed.add(e.inbox_seq);
          this.handlerErrors++;
          throw new AppRefused(`entry ${e.inbox_seq}: conformance: the app failed`);
        }
        this.entries.push(e.inbox_seq);
        this.handed.push([e.inbox_seq, e.conversation_id, e.message?.seq ?? 0]);
      },
      onUpdate: (m: Message) => {
        this.updates.push([m.conversation_id, m.seq, m.version ?? 0]);
      },
      onTooLong: (t: TooLong) => {
        this.tooLongs.push(t);
      },
      onSendResult: (r: SendResult) => {
        this.results.set(r.msgId, r);
      },
      onStatus: process.env.CONFORMANCE_DEBUG ? (st: unknown) => console.log("status", JSON.stringify(st)) : undefined,
    };
  }
}

function startingState(s: Scenario["start"]): State {
  const st = emptyState();
  st.epoch = s.epoch;
  st.cursor = s.cursor;
  for (const [cid, c] of Object.entries(s.conversations ?? {})) {
    st.conversations[cid] = { lastSeq: c.last_seq, recordVersion: 0, holes: [] };
    if (c.large) st.conversations[cid].large = true;
    if (c.change_count) st.conversations[cid].changeCount = c.change_count;
  }
  for (const o of s.outbox ?? []) {
    st.outbox.push({ msgId: o.msg_id, conversationId: o.conversation_id, body: o.body, queuedAt: Date.now() });
  }
  return st;
}

/** conformanceConfig shrinks every wait of the SDK (the README's table, under the TypeScript names). */
function conformanceConfig(sc: Scenario, url: string, store: MemoryStore, obs: Observed): ClientConfig {
  const transports: { [k: string]: Transport } = { "": "auto", auto: "auto", websocket: "websocket", polling: "polling" };
  const transport = transports[sc.transport ?? ""];
  assert.ok(transport, `transport ${sc.transport}`);
  return {
    baseUrl: url, token: "conformance", store, handlers: obs.handlers(), transport,
    WebSocket: NodeWebSocket as unknown as WebSocketCtor,
    startupJitterMs: -1,
    backoffInitialMs: 1, backoffMaxMs: 10,
    stablePeriodMs: 3_600_000, // every session counts as short: wsFallbackAfter is what decides
    breakerThreshold: 1000, breakerCooldownMs: 10,
    wsFallbackAfter: sc.config?.ws_fallback_after || 1000, // no fallback unless the scenario asks
    pollingPeriodMs: 3_600_000,
    longPollWaitSec: 1,
    gapWaitMs: 20, headWaitMs: 20,
    requestTimeoutMs: 5000, sendTimeoutMs: 1000, pendingRecheckMs: 10,
  };
}

/** Runner runs a client until stopped or it ends with an error other than the app's; after those it restarts on the same store. */
class Runner {
  private current?: Client;
  private stopped = false;
  done = false;
  error: unknown;
  readonly finished: Promise<void>;
  /** first: the first client made (undefined if stopped before), for the app's actions. */
  readonly first: Promise<Client | undefined>;
  private gotFirst!: (c: Client | undefined) => void;

  get isStopped(): boolean {
    return this.stopped;
  }

  constructor(private readonly cfg: ClientConfig) {
    this.first = new Promise((resolve) => (this.gotFirst = resolve));
    this.finished = this.loop().then(
      () => void (this.done = true),
      (err) => {
        this.error = err;
        this.done = true;
      },
    ).finally(() => this.gotFirst(undefined));
  }

  private async loop(): Promise<void> {
    for (;;) {
      const c = await Client.create(this.cfg);
      this.current = c;
      this.gotFirst(c);
      if (this.stopped) return;
      try {
        await c.start();
        return;
      } catch (err) {
        if (this.stopped || !(err instanceof HandlerError && err.cause instanceof AppRefused)) throw err;
      }
    }
  }

  async stop(): Promise<void> {
    this.stopped = true;
    await this.current?.stop();
    await this.finished;
  }
}

/** runActions makes the app's calls on the runner's first client, one after the other, and records how each ended. */
async function runActions(runner: Runner, actions: Action[], obs: Observed): Promise<void> {
  if (actions.length === 0) return;
  const c = await runner.first;
  if (!c) return;
  for (const a of actions) {
    const r: ActionResult = {};
    try {
      if (a.upload) {
        const u = a.upload;
        const file = { name: u.name, contentType: u.content_type, data: conformanceFile(u.size) };
        r.upload = u.resume_id ? await c.resumeUpload(u.conversation_id, u.resume_id, file) : await c.upload(u.conversation_id, file);
      } else if (a.send) {
        r.sent = await sendAndWait(runner, c, a.send, obs);
      } else if (a.search) {
        r.found = await search(c, a.search);
      }
    } catch (err) {
      r.error = err;
    }
    if (runner.isStopped) return; // stopped: the action did not end
    obs.actions.push(r);
  }
}

/** sendAndWait sends s and waits for its result (onSendResult). */
async function sendAndWait(runner: Runner, c: Client, s: NonNullable<Action["send"]>, obs: Observed): Promise<SendResult | undefined> {
  const id = await c.send(s.conversation_id, s.body, { attachments: s.attachments });
  obs.appSends.add(id);
  for (;;) {
    const r = obs.results.get(id);
    if (r) return r;
    if (runner.isStopped) return undefined;
    await new Promise((resolve) => setTimeout(resolve, 2));
  }
}

/** reached reports whether the client's state got to the expected end. */
function reached(store: MemoryStore, obs: Observed, e: Expectation, actions: number): boolean {
  if (obs.actions.length < actions) return false;
  const st = store.snapshot();
  if (!st || st.cursor !== e.cursor || st.epoch !== e.epoch || st.outbox.length !== (e.outbox ?? []).length) return false;
  for (const [cid, want] of Object.entries(e.conversations ?? {})) {
    const cs = st.conversations[cid];
    if (!cs || cs.lastSeq !== want.last_seq || (cs.changeCount ?? 0) !== (want.change_count ?? 0) || (cs.large ?? false) !== (want.large ?? false)) return false;
  }
  if (obs.largeMessages.length < (e.large_messages ?? []).length) return false;
  return obs.entries.length >= (e.entries ?? []).length && obs.updates.length >= (e.updates ?? []).length &&
    obs.results.size >= Object.keys(e.sent ?? {}).length + Object.keys(e.send_errors ?? {}).length &&
    obs.tooLongs.length >= (e.too_long ?? []).length && e.permanent === undefined;
}

async function runScenario(sc: Scenario): Promise<void> {
  const srv = new ScriptServer(sc.script);
  await srv.listen();
  const store = new MemoryStore(startingState(sc.start));
  const obs = new Observed(sc.handler?.fail_once ?? []);
  const runner = new Runner(conformanceConfig(sc, srv.url, store, obs));
  const actionsDone = runActions(runner, sc.actions ?? [], obs);
  // A known divergence (a todo) gets 3 s: it would otherwise hold the suite for the whole deadline.
  const deadlineMs = divergences[sc.name] ? 3000 : scenarioDeadlineMs;
  const deadline = Date.now() + deadlineMs;
  let timedOut = false;
  for (;;) {
    if (runner.done) break;
    if (srv.consumed() && reached(store, obs, sc.expect, (sc.actions ?? []).length)) break;
    if (Date.now() > deadline) {
      timedOut = true;
      break;
    }
    await new Promise((r) => setTimeout(r, 5));
  }
  await runner.stop();
  await srv.close();
  await actionsDone;
  const log = srv.log;
  try {
    assert.ok(!timedOut, `the scenario did not end within ${deadlineMs} ms (every step used: ${srv.consumed()})`);
    checkScenario(sc.expect, log, store, obs, runner.error);
    checkActions(sc.actions ?? [], obs);
  } catch (err) {
    (err as Error).message += `\nrequests: ${JSON.stringify(log)}`;
    throw err;
  } finally {
    if (process.env.CONFORMANCE_LOG) console.log(`${sc.name} requests: ${JSON.stringify(log)}`);
  }
}

function checkScenario(e: Expectation, log: LoggedRequest[], store: MemoryStore, obs: Observed, runErr: unknown): void {
  for (const r of log) {
    assert.ok(!r.early, `${r.method} ${r.path} came before the Retry-After of the answer before it`);
    assert.ok(!r.bad_body, `${r.method} ${r.path}: the sealed body: ${r.bad_body}`);
  }
  checkRequests(e.requests ?? [], log);

  if (e.permanent) {
    assert.ok(runErr instanceof PermanentError, `the client should have stopped for good; it ended with ${String(runErr)}`);
    assert.equal(runErr.status ?? 0, e.permanent.status ?? 0, "permanent error status");
    assert.equal(runErr.closeCode ?? 0, e.permanent.close_code ?? 0, "permanent error close code");
  } else {
    assert.equal(runErr, undefined, `the client stopped: ${String(runErr)}`);
  }

  const st = store.snapshot()!;
  assert.deepEqual(obs.entries, e.entries ?? [], "inbox_seqs handed to the app, in order, each once");
  assert.equal(st.cursor, e.cursor, "cursor");
  assert.equal(st.epoch, e.epoch, "epoch");
  assert.deepEqual(st.outbox.map((o) => o.msgId), e.outbox ?? [], "outbox");
  assert.equal(obs.handlerErrors, e.handler_errors ?? 0, "handler errors");
  assert.deepEqual(obs.updates, e.updates ?? [], "(conversation, seq, version) handed to onUpdate, in order, each once");
  assert.deepEqual(obs.largeMessages, e.large_messages ?? [], "(conversation, seq) handed to onEntry with inbox_seq 0, in order, each once");
  if (e.handed) assert.deepEqual(obs.handed, e.handed, "(inbox_seq, conversation, seq) accepted by onEntry, in order");
  for (const [cid, want] of Object.entries(e.conversations ?? {})) {
    const cs = st.conversations[cid];
    assert.ok(cs, `conversation ${cid} in the store`);
    assert.deepEqual({ last_seq: cs.lastSeq, large: cs.large ?? false, change_count: cs.changeCount ?? 0 },
      { last_seq: want.last_seq, large: want.large ?? false, change_count: want.change_count ?? 0 }, `conversation ${cid} in the store`);
  }

  const sent: { [id: string]: number } = {};
  const sendErrs: { [id: string]: number } = {};
  for (const [id, r] of obs.results) {
    if (obs.appSends.has(id)) continue; // an action's send: checked with the action
    if (r.message) sent[id] = r.message.seq;
    else sendErrs[id] = r.error instanceof ApiError ? r.error.status : -1;
  }
  assert.deepEqual(sent, e.sent ?? {}, "sends ended with a seq");
  assert.deepEqual(sendErrs, e.send_errors ?? {}, "sends refused");

  const wantTL = e.too_long ?? [];
  assert.equal(obs.tooLongs.length, wantTL.length, "too_long handed to the app");
  wantTL.forEach((want, i) => {
    const got = obs.tooLongs[i];
    assert.equal(got.epoch, want.epoch, `too_long ${i} epoch`);
    assert.equal(got.head, want.head, `too_long ${i} head`);
    assert.deepEqual(holesJSON(got.newHoles), want.new_holes ?? {}, `too_long ${i} new holes`);
  });
  if (e.holes) {
    const got: { conversationId: number; hole: Hole }[] = [];
    for (const [cid, cs] of Object.entries(st.conversations)) for (const h of cs.holes) got.push({ conversationId: Number(cid), hole: h });
    assert.deepEqual(holesJSON(got), e.holes, "holes in the store");
  }
}

/** checkActions compares how each of the app's calls ended with its expected outcome. */
function checkActions(actions: Action[], obs: Observed): void {
  assert.equal(obs.actions.length, actions.length, "the app's actions that ended");
  actions.forEach((a, i) => {
    const got = obs.actions[i];
    const want = a.expect;
    if (want.upload) {
      assert.equal(got.error, undefined, `action ${i}: ${String(got.error)}`);
      assert.ok(subset(want.upload, got.upload), `action ${i}: the upload ${JSON.stringify(got.upload)}, want (a subset) ${JSON.stringify(want.upload)}`);
    } else if (want.error) {
      assert.ok(!(got.error instanceof UploadError), `action ${i}: an upload error (${String(got.error)}), want an API error alone`);
      assert.ok(got.error instanceof ApiError, `action ${i}: want an ApiError, got ${String(got.error)}`);
      assert.equal(got.error.status, want.error.status, `action ${i}: the API error's status`);
    } else if (want.upload_error) {
      assert.ok(got.error instanceof UploadError, `action ${i}: want an UploadError, got ${String(got.error)}`);
      assert.equal(got.error.id, want.upload_error.id, `action ${i}: the upload error's id`);
    } else if (want.sent) {
      assert.equal(got.error, undefined, `action ${i}: ${String(got.error)}`);
      assert.equal(got.sent?.error, undefined, `action ${i}: the send's result: ${String(got.sent?.error)}`);
      assert.ok(got.sent?.message, `action ${i}: the send's message`);
      assert.equal(got.sent.message.seq, want.sent.seq, `action ${i}: the sent message's seq`);
      assert.deepEqual((got.sent.message.attachments ?? []).map((at) => at.id), want.sent.attachments ?? [],
        `action ${i}: the sent message's attachments`);
    } else if (want.found) {
      assert.equal(got.error, undefined, `action ${i}: ${String(got.error)}`);
      const { next_cursor: nc, estimated_total: et, ...rest } = want.found;
      assert.deepEqual(got.found, { ...rest, next_cursor: nc, estimated_total: et }, `action ${i}: what the search found`);
    }
  });
}

/**
 * checkRequests compares the log with the expected requests, path by path:
 * only the order within one path is part of the contract. Held requests
 * (beyond the script) are not checked.
 */
function checkRequests(want: ExpectedRequest[], log: LoggedRequest[]): void {
  const paths = new Set<string>(want.map((w) => w.path));
  for (const r of log) if (r.step >= 0) paths.add(r.path);
  for (const p of paths) {
    const got = log.filter((r) => r.path === p && r.step >= 0);
    let i = 0;
    want.forEach((w, k) => {
      if (w.path !== p) return;
      let lo = 1;
      let hi = 1;
      if (w.times !== undefined) lo = hi = w.times;
      if (w.min_times !== undefined) lo = w.min_times;
      if (w.max_times !== undefined) hi = w.max_times;
      hi = Math.max(lo, hi);
      let n = 0;
      while (n < hi && i < got.length && matches(w, got[i])) {
        n++;
        i++;
      }
      assert.ok(n >= lo, `expected request ${k} (${w.method} ${w.path} ${JSON.stringify(w.query ?? {})} ${JSON.stringify(w.body ?? null)}): ` +
        `${n} matched in a row at position ${i} of ${p}`);
    });
    assert.equal(i, got.length, `requests to ${p} beyond the expected ones (from position ${i})`);
  }
}

function holesJSON(hs: { conversationId: number; hole: Hole }[]): Holes {
  const out: Holes = {};
  for (const { conversationId, hole } of hs) (out[String(conversationId)] ??= []).push([hole.from, hole.to]);
  return out;
}

test("conformance", { concurrency: true }, async (t) => {
  // CONFORMANCE_ONLY=name runs one scenario.
  const only = process.env.CONFORMANCE_ONLY;
  const files = readdirSync(scenarioDir).filter((f) => f.endsWith(".json") && (!only || f === `${only}.json`)).sort();
  assert.ok(files.length > 0, `no scenario in ${scenarioDir}`);
  await Promise.all(files.map((f) => {
    const sc = JSON.parse(readFileSync(join(scenarioDir, f), "utf8")) as Scenario;
    assert.equal(f, `${sc.name}.json`, "a scenario's file is named after it");
    (sc.actions ?? []).forEach((a, i) => {
      assert.equal([a.upload, a.send, a.search].filter((x) => x !== undefined).length, 1, `${f}: action ${i} is one upload, one send or one search`);
      assert.equal(Object.keys(a.expect).length, 1, `${f}: action ${i} expects one outcome`);
    });
    return t.test(sc.name, { todo: divergences[sc.name] }, () => runScenario(sc));
  }));
});
