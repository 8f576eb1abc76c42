// Helpers of the integration tests: a user's Api on dev, condition waits, and
// the exactly-once, in-order check of what a client delivered.
import assert from "node:assert/strict";
import { Api } from "../../src/api.js";
import { devToken, type Entry } from "../../src/index.js";

export async function userApi(url: string, user: number): Promise<Api> {
  const token = await devToken(url, user);
  return new Api({ baseUrl: url, token: () => token });
}

/** waitFor polls cond every 20 ms until it holds; it rejects after ms. */
export async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

export interface Got {
  seq: number;
  inbox: number;
  body: unknown;
  epoch: number; // the client's epoch when it was handed over
}

/** Recorder keeps every entry a client hands over, and those of one conversation's text messages. */
export class Recorder {
  readonly all: { inbox: number; epoch: number }[] = []; // every entry, in delivery order
  readonly got: Got[] = [];

  constructor(readonly cid: () => number, readonly epoch: () => number = () => 0) {}

  readonly onEntry = (e: Entry): void => {
    const epoch = this.epoch();
    this.all.push({ inbox: e.inbox_seq, epoch });
    const m = e.message;
    if (e.kind === "message" && m?.kind === "text" && m.conversation_id === this.cid()) this.got.push({ seq: m.seq, inbox: e.inbox_seq, body: m.body, epoch });
  };

  /** inboxSeqs lists the inbox_seqs handed over in an epoch (all of them without one). */
  inboxSeqs(epoch?: number): number[] {
    return this.all.filter((a) => epoch === undefined || a.epoch === epoch).map((a) => a.inbox);
  }

  texts(): unknown[] {
    return this.got.map((g) => g.body);
  }
}

/**
 * assertOnceInOrder: the conversation's text messages are exactly `bodies`, in
 * order, with consecutive seqs from the first one; inbox_seqs ascend (within
 * one epoch: pass the entries of each epoch separately if there were two).
 */
export function assertOnceInOrder(got: Got[], bodies: string[]): void {
  assert.deepEqual(got.map((g) => g.body), bodies, "each message once, in order");
  const first = got[0].seq;
  assert.deepEqual(got.map((g) => g.seq), bodies.map((_, i) => first + i), "consecutive seqs");
  assertAscending(got.map((g) => g.inbox), "inbox_seq");
}

export function assertAscending(xs: number[], what: string): void {
  for (let i = 1; i < xs.length; i++) assert.ok(xs[i] > xs[i - 1], `${what} ascending: ${xs[i - 1]} then ${xs[i]} (${xs.join(",")})`);
}

export async function sendAll(api: Api, cid: number, bodies: string[]): Promise<void> {
  for (const body of bodies) await api.send(cid, { msg_id: crypto.randomUUID(), body });
}

export const range = (prefix: string, from: number, to: number): string[] => Array.from({ length: to - from + 1 }, (_, i) => `${prefix}${from + i}`);

/** settle: a short wait after the last expected message, so anything extra would show up before the assertions. */
export const settle = (): Promise<void> => new Promise((r) => setTimeout(r, 400));
