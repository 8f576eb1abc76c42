// The client's persisted state and the Store interface.

/** Hole is a range of conversation seqs [from, to] the device has not got. */
export interface Hole {
  from: number;
  to: number;
}

/** ConversationState is what the client keeps of one conversation: how far it is, and the history it lacks. */
export interface ConversationState {
  /** lastSeq: the highest seq delivered or known from the conversation list. */
  lastSeq: number;
  /** recordVersion: the highest version of the conversation's record seen. */
  recordVersion: number;
  /** holes: the seqs not delivered, ascending and disjoint (backfill reads them). */
  holes: Hole[];
  /** versions: per changed message (seq), the highest version handed to the app, only above 1. */
  versions?: { [seq: string]: number };
  /** stale: seqs delivered before a too_long whose update entries the jump skipped; backfill reads them again. */
  stale?: Hole[];
  /** large: the conversation is in read mode; lastSeq is then the last seq delivered (docs/large-conversations.md). */
  large?: boolean;
  /** changeCount: the conversation's change count up to which its changes were read (?changed_after=). */
  changeCount?: number;
}

/** OutboxItem is one queued send; msgId is fixed before the first attempt and never changes. */
export interface OutboxItem {
  msgId: string;
  conversationId: number;
  body: string;
  replyTo?: number;
  mentions?: number[];
  mentionAll?: boolean;
  /** attachments: upload ids the message attaches. */
  attachments?: string[];
  /** pending: the send was answered 202 (in the log, its seq comes later). */
  pending?: boolean;
  queuedAt: number;
}

/** State is everything the client persists: (epoch, cursor), per-conversation positions and holes, the outbox. */
export interface State {
  version: 1;
  epoch: number;
  cursor: number;
  recordVersion: number;
  conversations: { [cid: string]: ConversationState };
  outbox: OutboxItem[];
}

/**
 * emptyState returns the state of a client that never synced: what
 * Client.create starts from when the store's load returns undefined.
 */
export function emptyState(): State {
  return { version: 1, epoch: 0, cursor: 0, recordVersion: 0, conversations: {}, outbox: [] };
}

/**
 * Store persists the client state. load is called once at start; save gets
 * the whole state after every change that must not be lost (the cursor after
 * a handler succeeded, an outbox change). save must be atomic: a crash leaves
 * the old state or the new one. Implement it on your own database to commit
 * the state with the effects of the entries (exactly once across crashes).
 * The client never calls save concurrently with itself.
 */
export interface Store {
  /** load returns the saved state, or undefined when nothing was saved yet; a state of an unknown shape rejects. */
  load(): Promise<State | undefined>;
  /** save replaces the saved state with this one, atomically; it resolves when the state is durable. */
  save(state: State): Promise<void>;
  /** close releases what the store holds (a lock, a database); the app calls it after Client.stop. */
  close?(): Promise<void>;
}

/**
 * cloneState deep-copies a state (stores keep their own copy).
 *
 * @internal
 */
export function cloneState(s: State): State {
  return JSON.parse(JSON.stringify(s)) as State;
}

/**
 * checkState checks the shape of a loaded state; a store holding something else is an error, not a reset.
 *
 * @internal
 */
export function checkState(v: unknown): State {
  const s = v as State;
  if (typeof s !== "object" || s === null || s.version !== 1 || typeof s.cursor !== "number" ||
      typeof s.epoch !== "number" || !Array.isArray(s.outbox) || typeof s.conversations !== "object") {
    throw new Error("inboxd: stored state has an unknown shape");
  }
  return s;
}

/** MemoryStore keeps the state in memory: nothing survives the process. For tests and short-lived tools. */
export class MemoryStore implements Store {
  private state: State | undefined;
  saves = 0;

  constructor(initial?: State) {
    this.state = initial ? cloneState(initial) : undefined;
  }

  async load(): Promise<State | undefined> {
    return this.state ? cloneState(this.state) : undefined;
  }

  async save(state: State): Promise<void> {
    this.state = cloneState(state);
    this.saves++;
  }

  /** snapshot returns a copy of what was saved last. */
  snapshot(): State | undefined {
    return this.state ? cloneState(this.state) : undefined;
  }
}
