/**
 * `@inboxd/client`: the browser-safe entry (no `node:` imports). It exports
 * the public API only: the {@link Client}, the {@link MemoryStore}, the
 * errors the client rejects with, and the types of its configuration,
 * handlers, state and messages. Node apps that want the file store import
 * `@inboxd/client/node` (this API plus `FileStore`); browsers that want
 * IndexedDB import `@inboxd/client/indexeddb`. Everything else in the
 * package is internal (marked `@internal`) and may change in any release;
 * test/unit/exports.test.ts lists what each entry exports, so a new export
 * is a deliberate change.
 *
 * @module @inboxd/client
 */
export { Client, type BackfillResult, type ClientConfig, type ClientHandlers, type Status, type Transport } from "./client.js";
export { MultipartThreshold, type UploadFile } from "./uploads.js";
export { MemoryStore, emptyState, type ConversationState, type Hole, type OutboxItem, type State, type Store } from "./store.js";
export { ApiError, HandlerError, PermanentError, StoreError, UploadError } from "./errors.js";
export { devToken, type FetchLike, type TokenSource } from "./api.js";
export type { Handlers, TooLong } from "./inbox.js";
export type { SendOptions, SendResult } from "./outbox.js";
export type { WebSocketCtor, WebSocketLike } from "./transport_ws.js";
export { KindMessage, KindRecord, KindUpdate, type Attachment, type Counts, type Entry, type History, type Message, type Reaction, type Record, type Thumbnail, type Upload, type UploadPart } from "./protocol.js";
export type { Block, Change, ChangeKind, ChangeOptions, ChangeResult, ConversationSettings, Member, Presence, Receipt, ReceiptEvent, Report, ReportOptions, ReportResult, Sanction, SearchOrder, SearchPage, SearchQuery, SearchResult, Settings, SettingsPatch, SnippetPart, TypingEvent } from "./app.js";
