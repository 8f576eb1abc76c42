// Errors, classified once: an ApiError is an HTTP answer in the protocol's
// error shape; isPermanent says whether retrying can ever help.

/** ApiError is a non-2xx HTTP answer. retryAfterMs comes from Retry-After (or X-RateLimit-Reset on a 429). */
export class ApiError extends Error {
  constructor(
    readonly status: number,
    readonly code: string,
    message: string,
    readonly retryable: boolean,
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
    readonly status: number | undefined,
    readonly closeCode: number | undefined,
    readonly code: string,
    message: string,
  ) {
    super(`inboxd: permanent: ${message}`);
    this.name = "PermanentError";
  }
}

/** HandlerError wraps an error thrown by an app handler: it stops the client; the entry comes again on the next start. */
export class HandlerError extends Error {
  constructor(readonly handler: string, readonly cause: unknown) {
    super(`inboxd: handler ${handler} failed: ${String(cause)}`);
    this.name = "HandlerError";
  }
}

/** StoreError wraps a failure of the Store: it stops the client. */
export class StoreError extends Error {
  constructor(readonly op: string, readonly cause: unknown) {
    super(`inboxd: store ${op}: ${String(cause)}`);
    this.name = "StoreError";
  }
}

const permanentStatuses = new Set([400, 401, 403, 404, 413]);

/** isRetryableStatus: 408, 429 and 5xx are worth retrying; other 4xx are not. */
export function isRetryableStatus(status: number): boolean {
  return status === 408 || status === 429 || status >= 500;
}

/** isPermanentStatus: the statuses that stop the sync loop (and refuse a send for good). */
export function isPermanentStatus(status: number): boolean {
  return permanentStatuses.has(status) || (status >= 400 && status < 500 && !isRetryableStatus(status));
}

/** isFatal: errors that end the client's run rather than being retried. */
export function isFatal(err: unknown): boolean {
  return err instanceof PermanentError || err instanceof HandlerError || err instanceof StoreError;
}
