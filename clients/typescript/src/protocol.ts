// Wire types of the inboxd protocol, mirroring the Go package protocol/
// (docs/protocol.md for HTTP, docs/websocket.md for the WebSocket). Field
// names are the JSON names; int64 values are JavaScript numbers (the server's
// ids and seqs stay below 2^53).

export const KindMessage = "message";
export const KindRecord = "record";
export const KindUpdate = "update";

export interface Reaction {
  emoji: string;
  count: number;
  me?: boolean;
}

export interface Message {
  conversation_id: number;
  seq: number;
  msg_id: string;
  sender_id: number;
  kind: string; // "text" or "system"
  body: unknown; // a JSON string for text messages
  created_at: string;
  version?: number;
  edited_at?: string;
  deleted?: boolean;
  reply_to?: number;
  reactions?: Reaction[];
  mentions?: number[];
  mention_all?: boolean;
  /** changed_ord: in a read-mode conversation, its change count at the message's last change (?changed_after= order). */
  changed_ord?: number;
  /** sender_name: a back-end service's named system or bot sender (server API); sender_id is 0 then. */
  sender_name?: string;
}

/** LargeHead: where a read-mode conversation is (docs/large-conversations.md). */
export interface LargeHead {
  conversation_id: number;
  last_seq: number;
  change_count: number;
}

export interface Record {
  conversation_id: number;
  title: string;
  pinned: boolean;
  muted: boolean;
  read_seq: number;
  last_seq: number;
  last_message: Message | null;
  version: number;
  removed: boolean;
  unread_count: number;
  mention_count: number;
}

export interface Counts {
  unread_total: number;
  mention_total: number;
}

export interface Entry {
  inbox_seq: number;
  conversation_id: number;
  kind: string; // KindMessage, KindRecord, KindUpdate, or kinds to come
  message?: Message;
  record?: Record;
}

export interface Polling {
  next_interval_ms: number;
  reconnect?: Reconnect; // the crash hint, as a welcome's
}

/** SyncAnswer is the body of GET /v1/sync: a page of entries or a too-long answer. */
export interface SyncAnswer extends Partial<Counts> {
  too_long?: boolean;
  epoch: number;
  head: number;
  entries?: Entry[];
  has_more?: boolean;
  record_version?: number;
  conversations?: Record[];
  next_page?: string | null;
  _polling?: Polling;
  /** large: the user's read-mode conversations (absent: none). */
  large?: LargeHead[];
}

/** TooLongAnswer is a too-long answer (HTTP or the WebSocket frame). */
export interface TooLongAnswer extends Partial<Counts> {
  too_long: true;
  epoch: number;
  head: number;
  record_version: number;
  conversations: Record[];
  next_page: string | null;
  large?: LargeHead[];
}

export interface ConversationList {
  epoch: number;
  inbox_head: number;
  record_version: number;
  conversations: Record[];
  next_page: string | null;
}

export interface History {
  messages: Message[];
  has_more: boolean;
}

export interface SendMessage {
  msg_id: string;
  body: string;
  reply_to?: number;
  mentions?: number[];
  mention_all?: boolean;
}

export interface SendPending {
  msg_id: string;
  status: "pending";
}

export interface ErrorBody {
  /** retry_after_ms: a 503's reconnect hint, the precise form of Retry-After (docs/protocol.md, "Reconnect hints"). */
  error: { code: string; message: string; retryable: boolean; retry_after_ms?: number };
}

/** Reconnect is the welcome's hint for a connection lost without a close frame. */
export interface Reconnect {
  after_ms: number;
  window_ms: number;
}

export interface DevToken {
  token: string;
  user_id: number;
  expires_at: string;
}

// WebSocket frames.

export interface Hello {
  type: "hello";
  after: number;
  epoch?: number;
  /** large: the client reads read-mode conversations itself (messages and large frames). */
  large?: boolean;
}

/** ServerFrame is any frame the server sends; type says which fields are set. */
export interface ServerFrame extends Partial<Counts> {
  type: string;
  epoch?: number;
  head?: number;
  heartbeat_ms?: number;
  entries?: Entry[];
  too_long?: boolean;
  record_version?: number;
  conversations?: Record[];
  next_page?: string | null;
  msg_id?: string;
  conversation_id?: number;
  seq?: number;
  code?: string;
  message?: string;
  retryable?: boolean;
  retry_after_ms?: number;
  user_id?: number; // typing, presence, receipt
  state?: string; // typing: "start" or "stop"
  expires_in_ms?: number; // typing
  online?: boolean; // presence
  last_seen?: string; // presence
  read_seq?: number; // receipt
  large?: LargeHead[]; // welcome, too_long, large
  reconnect?: Reconnect; // welcome
  last_seq?: number; // messages
  change_count?: number; // messages
  messages?: Message[]; // messages: new ones, ascending
  changed?: Message[]; // messages: changed since the previous frame
}

export const FrameWelcome = "welcome";
export const FrameEntries = "entries";
export const FrameTooLong = "too_long";
export const FrameHeartbeat = "heartbeat";
export const FrameError = "error";
export const FrameMessages = "messages";
export const FrameLarge = "large";

export const CloseUnauthorized = 4001;
export const CloseNotAllowed = 4003;
export const CloseTooSlow = 4008;
export const CloseRateLimited = 4029;
export const CloseServiceRestart = 1012;
export const CloseTryAgainLater = 1013;
export const CloseGoingAway = 1001;
