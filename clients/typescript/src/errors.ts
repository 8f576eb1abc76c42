// Errors, classified once: an ApiError is an HTTP answer in the protocol's
// error shape; isPermanent says whether retrying can ever help.

/** ApiError is a non-2xx HTTP answer. retryAfterMs comes from Retry-After (or X-RateLimit-Reset on a 429). */
export class ApiError extends Error {
  constructor(
    /** status: the HTTP status (0: the answer did not continue the cursor, a client-side check). */
    readonly status: number,
    /** code: the protocol's error code (docs/protocol.md), or `http_<status>` for an answer without the error shape. */
    readonly code: string,
    message: string,
    /** retryable: the same request may succeed later (408, 429, 5xx, or the body says so). */
    readonly retryable: boolean,
    /** retryAfterMs: how long to wait before retrying, when the server said. */
    readonly retryAfterMs?: number,
    /** hinted: retryAfterMs is the body's retry_after_ms, a moment the server picked for this client. */
    readonly hinted: boolean = false,
  ) {
    super(`inboxd: ${status} ${code}: ${message}`);
    this.name = "ApiError";
  }
}

/**
 * PermanentError ends the client: a 400/401/403/404 on sync, or a WebSocket
 * close 4001/4003. The app must act (sign in again, fix the configuration).
 */
export class PermanentError extends Error {
  constructor(
    /** status: the HTTP status that ended the client (undefined for a WebSocket close). */
    readonly status: number | undefined,
    /** closeCode: the WebSocket close code that ended it (undefined for an HTTP answer). */
    readonly closeCode: number | undefined,
    /** code: the protocol's error code. */
    readonly code: string,
    message: string,
  ) {
    super(`inboxd: permanent: ${message}`);
    this.name = "PermanentError";
  }
}

/** HandlerError wraps an error thrown by an app handler: it stops the client; the entry comes again on the next start. */
export class HandlerError extends Error {
  constructor(
    /** handler: the handler's name (onEntry, onTooLong, …). */
    readonly handler: string,
    /** cause: what the handler threw. */
    readonly cause: unknown,
  ) {
    super(`inboxd: handler ${handler} failed: ${String(cause)}`);
    this.name = "HandlerError";
  }
}

/** StoreError wraps a failure of the Store: it stops the client. */
export class StoreError extends Error {
  constructor(
    /** op: the store's call that failed (save). */
    readonly op: string,
    /** cause: what the store threw. */
    readonly cause: unknown,
  ) {
    super(`inboxd: store ${op}: ${String(cause)}`);
    this.name = "StoreError";
  }
}

/**
 * UploadError is an upload that failed after the server made it (a PUT to
 * the store, a part, its completion): Client.resumeUpload with id sends
 * only what the store still lacks. An error before the server made the
 * upload (a 413 for a file too large) is an ApiError, with no upload to
 * resume.
 */
export class UploadError extends Error {
  constructor(
    /** id: the upload's id, which resumes it. */
    readonly id: string,
    /** cause: what failed (an ApiError, the network's error, the store's answer). */
    readonly cause: unknown,
  ) {
    super(`inboxd: upload ${id}: ${cause instanceof Error ? cause.message : String(cause)}`);
    this.name = "UploadError";
  }
}

const permanentStatuses = new Set([400, 401, 403, 404, 413]);

/**
 * isRetryableStatus: 408, 429 and 5xx are worth retrying; other 4xx are not.
 *
 * @internal
 */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/**
 * isPermanentStatus: the statuses that stop the sync loop (and refuse a send for good).
 *
 * @internal
 */
export function isPermanentStatus(status: number): boolean {
  return permanentStatuses.has(status) || (status >= 400 && status < 500 && !isRetryableStatus(status));
}

/**
 * isFatal: errors that end the client's run rather than being retried.
 *
 * @internal
 */
export function isFatal(err: unknown): err is PermanentError | HandlerError | StoreError {
  return err instanceof PermanentError || err instanceof HandlerError || err instanceof StoreError;
}
