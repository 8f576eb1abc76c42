// Wire types of the inboxd protocol, mirroring the Go package protocol/
// (docs/protocol.md for HTTP, docs/websocket.md for the WebSocket). Field
// names are the JSON names; int64 values are JavaScript numbers (the server's
// ids and seqs stay below 2^53).

/** KindMessage is the kind of an entry carrying a new message (`Entry.message`). */
export const KindMessage = "message";
/** KindRecord is the kind of an entry carrying the user's conversation record (`Entry.record`). */
export const KindRecord = "record";
/** KindUpdate is the kind of an entry carrying a message's new state (edited, deleted, reactions; `Entry.message`). */
export const KindUpdate = "update";

/** Reaction is one emoji's count on a message; me: the user is among them. */
export interface Reaction {
  emoji: string;
  count: number;
  me?: boolean;
}

/** Message is one message of a conversation as the user sees it; (conversation_id, seq) names it, version orders its changes. */
export interface Message {
  conversation_id: number;
  seq: number;
  msg_id: string;
  sender_id: number;
  /** kind: "text" or "system". */
  kind: string;
  /** body: a JSON string for text messages. */
  body: unknown;
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
  /** attachments: the files the message attaches (docs/protocol.md, "Attachments"). */
  attachments?: Attachment[];
  /**
   * sender_blocked: the user blocks the sender (docs/protocol.md, "Blocks"); the message keeps its place but its body is ""
   * and its attachments and mentions are left out. The client hides such messages unless `showBlocked`.
   */
  sender_blocked?: boolean;
}

/** Attachment is a file a message attaches, with the key that opens it. */
export interface Attachment {
  id: string;
  name: string;
  content_type: string;
  /** size: the file's size (not sealed). */
  size: number;
  sha256?: string;
  width?: number;
  height?: number;
  /** key: 32 bytes, unpadded base64url. */
  key: string;
  /** thumbnail: an image's JPEG thumbnail, once the server made it. */
  thumbnail?: Thumbnail;
}

/** Thumbnail describes an attached image's thumbnail. */
export interface Thumbnail {
  content_type: string;
  size: number;
  width: number;
  height: number;
}

/**
 * Upload is an upload the server made room for: the answer of POST
 * /v1/conversations/{cid}/uploads, and of GET and POST .../complete on
 * /v1/conversations/{cid}/uploads/{id} (docs/protocol.md, "Attachments").
 */
export interface Upload {
  id: string;
  conversation_id: number;
  name: string;
  content_type: string;
  /** size: the file's bytes, not sealed. */
  size: number;
  sha256?: string;
  width?: number;
  height?: number;
  /** key: the key to seal the file with (32 bytes, unpadded base64url); absent once attached. */
  key?: string;
  /** sealed_size: the size of the sealed file. */
  sealed_size: number;
  /** chunk_size: the plaintext size of every sealed chunk but the last (65536). */
  chunk_size: number;
  /** url: where to PUT the whole sealed file (method "PUT"); absent for a multipart upload and once attached. */
  url?: string;
  /** method: "PUT" (the whole sealed file on url) or "multipart" (each of parts on its own URL, then complete). */
  method: string;
  /** headers: what the PUT on url must carry. */
  headers: { [name: string]: string };
  /** url_expires_at: when the URLs of this answer stop working; absent once attached. */
  url_expires_at?: string;
  /** expires_at: an upload not attached by then is removed. */
  expires_at: string;
  /** state: "open" (the store lacks the file, or in parts its completion), "uploaded" (the store holds it whole) or "attached" (a message took it). */
  state: "open" | "uploaded" | "attached";
  /** part_size: multipart: the plaintext bytes of every part but the last (a multiple of chunk_size). */
  part_size?: number;
  /** parts: multipart, while open: the first parts the store lacks (at most 100; a GET of the upload gives the next). */
  parts?: UploadPart[];
  /** parts_left: multipart, while open: how many parts the store lacks in all (absent: none). */
  parts_left?: number;
}

/**
 * UploadPart is a part of a multipart upload still to PUT: the sealed
 * chunks of the file's plaintext from (number-1)*part_size, size bytes
 * once sealed, on url with headers.
 */
export interface UploadPart {
  /** number: from 1. */
  number: number;
  /** size: the part's sealed bytes, which its PUT carries. */
  size: number;
  url: string;
  headers: { [name: string]: string };
}

/** @internal */
export interface AttachmentURL {
  url: string;
  expires_at: string;
  size: number;
  sealed_size: number;
}

/**
 * LargeHead: where a read-mode conversation is (docs/large-conversations.md).
 *
 * @internal
 */
export interface LargeHead {
  conversation_id: number;
  last_seq: number;
  change_count: number;
}

/** Record is the user's record of one conversation: read position, counts, flags and the last message. */
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
  /** frozen: only the conversation's admins and owner write (docs/protocol.md, "Frozen and slow mode"). */
  frozen?: boolean;
  /** slow_mode: seconds a member below moderator waits between its sends; 0 off. */
  slow_mode?: number;
  /** role: the user's role in the conversation; absent once removed (or from a server before roles). */
  role?: string;
}

/** Counts are the user's unread and mention totals over all conversations. */
export interface Counts {
  unread_total: number;
  mention_total: number;
}

/**
 * Entry is one entry of the user's inbox, handed to onEntry in inbox_seq
 * order (inbox_seq 0: a message of a read-mode conversation).
 */
export interface Entry {
  inbox_seq: number;
  conversation_id: number;
  /** kind: {@link KindMessage}, {@link KindRecord}, {@link KindUpdate}, or kinds to come (ignore those). */
  kind: string;
  message?: Message;
  record?: Record;
}

/** @internal */
export interface Polling {
  next_interval_ms: number;
  reconnect?: Reconnect; // the crash hint, as a welcome's
}

/**
 * SyncAnswer is the body of GET /v1/sync: a page of entries or a too-long answer.
 *
 * @internal
 */
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

/**
 * TooLongAnswer is a too-long answer (HTTP or the WebSocket frame).
 *
 * @internal
 */
export interface TooLongAnswer extends Partial<Counts> {
  too_long: true;
  epoch: number;
  head: number;
  record_version: number;
  conversations: Record[];
  next_page: string | null;
  large?: LargeHead[];
}

/** @internal */
export interface ConversationList {
  epoch: number;
  inbox_head: number;
  record_version: number;
  conversations: Record[];
  next_page: string | null;
}

/** History is a page of a conversation's messages, ascending; has_more: there are more beyond the page. */
export interface History {
  messages: Message[];
  has_more: boolean;
}

/** @internal */
export interface SendMessage {
  msg_id: string;
  body: string;
  reply_to?: number;
  mentions?: number[];
  mention_all?: boolean;
  attachments?: string[];
}

/** @internal */
export interface SendPending {
  msg_id: string;
  status: "pending";
}

/** @internal */
export interface ErrorBody {
  /** retry_after_ms: a 503's reconnect hint, the precise form of Retry-After (docs/protocol.md, "Reconnect hints"). */
  error: { code: string; message: string; retryable: boolean; retry_after_ms?: number };
}

/**
 * Reconnect is the welcome's hint for a connection lost without a close frame.
 *
 * @internal
 */
export interface Reconnect {
  after_ms: number;
  window_ms: number;
}

/** @internal */
export interface DevToken {
  token: string;
  user_id: number;
  expires_at: string;
}

// WebSocket frames: internal to the transport.

/** @internal */
export interface Hello {
  type: "hello";
  after: number;
  epoch?: number;
  /** large: the client reads read-mode conversations itself (messages and large frames). */
  large?: boolean;
}

/**
 * ServerFrame is any frame the server sends; type says which fields are set.
 *
 * @internal
 */
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
  /** send_ack: the files the projected message kept. */
  attachments?: Attachment[];
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

/** @internal */
export const FrameWelcome = "welcome";
/** @internal */
export const FrameEntries = "entries";
/** @internal */
export const FrameTooLong = "too_long";
/** @internal */
export const FrameHeartbeat = "heartbeat";
/** @internal */
export const FrameError = "error";
/** @internal */
export const FrameMessages = "messages";
/** @internal */
export const FrameLarge = "large";

/** @internal */
export const CloseUnauthorized = 4001;
/** @internal */
export const CloseNotAllowed = 4003;
/** @internal */
export const CloseTooSlow = 4008;
/** @internal */
export const CloseRateLimited = 4029;
/** @internal */
export const CloseServiceRestart = 1012;
/** @internal */
export const CloseTryAgainLater = 1013;
/** @internal */
export const CloseGoingAway = 1001;
