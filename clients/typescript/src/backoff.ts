// Backoff and the circuit breaker (docs/client.md, "Failures").

/**
 * BackoffConfig: the cap doubles from initialMs to maxMs; the wait is uniform in [0, cap].
 *
 * @internal
 */
export interface BackoffConfig {
  initialMs: number;
  maxMs: number;
  random?: () => number;
}

/**
 * Backoff is exponential with full jitter: after n failures the wait is
 * uniform in [0, min(max, initial*2^n)]. Full jitter spreads a crowd of
 * clients that failed together best. reset() is for a connection that stayed
 * up for the stable period only, so a server that accepts and drops at once
 * is still backed off from.
 *
 * @internal
 */
export class Backoff {
  private failures = 0;
  private readonly random: () => number;

  constructor(private readonly cfg: BackoffConfig) {
    this.random = cfg.random ?? Math.random;
  }

  /** cap is the upper bound of the next wait. */
  cap(): number {
    const exp = Math.min(this.failures, 30);
    return Math.min(this.cfg.maxMs, this.cfg.initialMs * 2 ** exp);
  }

  /** next returns the next wait and counts one more failure. */
  next(): number {
    const d = this.random() * this.cap();
    this.failures++;
    return d;
  }

  reset(): void {
    this.failures = 0;
  }

  get attempts(): number {
    return this.failures;
  }
}

/**
 * jitterUp adds 0..fraction to ms: Retry-After and the breaker's cooldown are spread, never shortened.
 *
 * @internal
 */
export function jitterUp(ms: number, fraction: number, random: () => number = Math.random): number {
  return ms * (1 + fraction * random());
}

/** @internal */
export interface BreakerConfig {
  threshold: number; // failures in a row that open the circuit
  cooldownMs: number; // how long it stays open (jittered +0..20%)
  now?: () => number;
  random?: () => number;
}

/**
 * CircuitBreaker counts attempts in a row that never got through. At
 * threshold it opens for the cooldown; then one probe is allowed, and a
 * failed probe opens it again at once.
 *
 * @internal
 */
export class CircuitBreaker {
  private failures = 0;
  private openUntil = 0;
  private probing = false;
  private readonly now: () => number;
  private readonly random: () => number;

  constructor(private readonly cfg: BreakerConfig) {
    this.now = cfg.now ?? Date.now;
    this.random = cfg.random ?? Math.random;
  }

  /** waitMs is how long to wait before the next attempt (0 when closed or half-open). */
  waitMs(): number {
    return Math.max(0, this.openUntil - this.now());
  }

  /** isOpen reports whether attempts are refused now. */
  isOpen(): boolean {
    return this.waitMs() > 0;
  }

  success(): void {
    this.failures = 0;
    this.openUntil = 0;
    this.probing = false;
  }

  /** failure counts a failed attempt; it returns true when it opened the circuit. */
  failure(): boolean {
    this.failures++;
    if (this.probing || this.failures >= this.cfg.threshold) {
      this.openUntil = this.now() + jitterUp(this.cfg.cooldownMs, 0.2, this.random);
      this.probing = true; // the attempt after the cooldown is a probe
      return true;
    }
    return false;
  }

  get openUntilMs(): number {
    return this.openUntil;
  }
}

/**
 * parseRetryAfter reads Retry-After (seconds or an HTTP date) in ms, or undefined.
 *
 * @internal
 */
export function parseRetryAfter(value: string | null, now: number = Date.now()): number | undefined {
  if (value == null || value.trim() === "") return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Number(v) * 1000;
  const t = Date.parse(v);
  if (Number.isNaN(t)) return undefined;
  return Math.max(0, t - now);
}

/**
 * sleep waits ms, or less when signal aborts (then it resolves, never rejects).
 *
 * @internal
 */
export function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    if (signal?.aborted || ms <= 0) return resolve();
    const t = setTimeout(done, ms);
    function done() {
      clearTimeout(t);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

/**
 * CrashPlan is the welcome's reconnect hint (docs/protocol.md, "Reconnect
 * hints") armed by a session lost without a close frame: the first attempt
 * after the loss is the backoff's (a network blip); if it finds the gateway
 * away, the client waits until after_ms plus a draw over window_ms from the
 * loss; the attempt after that is the backoff's again.
 *
 * @internal
 */
export class CrashPlan {
  private at = 0;
  private attempts = 0;

  /** arm after a session lost without a word; disarm otherwise. */
  arm(lostWithoutWord: boolean, hint: { after_ms: number; window_ms: number } | undefined, random: () => number = Math.random): void {
    this.attempts = 0;
    this.at = lostWithoutWord && hint ? Date.now() + hint.after_ms + random() * hint.window_ms : 0;
  }

  /** waitMs after an attempt that did not get through (away: it found the gateway away): the hinted wait, or undefined for the backoff's. */
  waitMs(away: boolean): number | undefined {
    if (this.at === 0) return undefined;
    this.attempts++;
    const at = this.at;
    if (this.attempts > 1 || !away) {
      this.at = 0;
      return undefined;
    }
    return Math.max(0, at - Date.now());
  }
}
