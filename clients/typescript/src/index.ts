// @inboxd/client: the browser-safe entry (no node: imports). Node apps that
// want the file store import @inboxd/client/node instead.
export * from "./protocol.js";
export * from "./errors.js";
export * from "./backoff.js";
export * from "./store.js";
export { Api, devToken, toApiError, type ApiConfig, type FetchLike, type TokenSource, type SyncParams, type SendOutcome } from "./api.js";
export { Inbox, type Handlers, type TooLong, type ApplyResult } from "./inbox.js";
export { type SendOptions, type SendResult } from "./outbox.js";
export { type WebSocketLike, type WebSocketCtor } from "./transport_ws.js";
export { Client, type ClientConfig, type ClientHandlers, type Status, type Transport, type BackfillResult } from "./client.js";
export { type Change, type ChangeKind, type ChangeOptions, type ChangeResult, type Member, type Presence, type Receipt, type ReceiptEvent, type Settings, type SettingsPatch, type TypingEvent } from "./app.js";
