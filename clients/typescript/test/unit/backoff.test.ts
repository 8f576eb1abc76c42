import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff, CircuitBreaker, CrashPlan, parseRetryAfter, jitterUp } from "../../src/backoff.js";
import { toApiError } from "../../src/api.js";

test("backoff: the cap doubles from initial to max and the wait is uniform in [0, cap]", () => {
  let r = 1;
  const b = new Backoff({ initialMs: 100, maxMs: 1000, random: () => r });
  const caps = [];
  for (let i = 0; i < 6; i++) caps.push(b.next());
  assert.deepEqual(caps, [100, 200, 400, 800, 1000, 1000]);
  r = 0;
  assert.equal(b.next(), 0);
  b.reset();
  r = 0.5;
  assert.equal(b.next(), 50);
});

test("backoff: random waits stay within the cap", () => {
  const b = new Backoff({ initialMs: 10, maxMs: 80 });
  for (let i = 0; i < 200; i++) {
    const cap = b.cap();
    const d = b.next();
    assert.ok(d >= 0 && d <= cap, `${d} within [0, ${cap}]`);
    assert.ok(cap <= 80);
  }
});

test("breaker: opens after threshold failures in a row, then one probe; a failed probe reopens", () => {
  let now = 1000;
  const br = new CircuitBreaker({ threshold: 3, cooldownMs: 100, now: () => now, random: () => 1 });
  assert.equal(br.failure(), false);
  assert.equal(br.failure(), false);
  assert.equal(br.isOpen(), false);
  assert.equal(br.failure(), true);
  assert.equal(br.waitMs(), 120); // cooldown + 20% jitter at most
  now += 120;
  assert.equal(br.isOpen(), false); // half-open: one probe
  assert.equal(br.failure(), true); // the probe failed: open again at once
  now += 120;
  br.success();
  assert.equal(br.failure(), false); // closed: counting starts over
});

test("breaker: a success in between resets the count", () => {
  const br = new CircuitBreaker({ threshold: 2, cooldownMs: 100 });
  br.failure();
  br.success();
  assert.equal(br.failure(), false);
});

test("retry-after: seconds, an HTTP date, garbage", () => {
  assert.equal(parseRetryAfter("3"), 3000);
  assert.equal(parseRetryAfter(new Date(10_000).toUTCString(), 5_000), 5000);
  assert.equal(parseRetryAfter("soon"), undefined);
  assert.equal(parseRetryAfter(null), undefined);
  assert.equal(jitterUp(1000, 0.2, () => 0.5), 1100);
});

test("crash plan: after a loss without a close frame, the first attempt is the backoff's, the second waits for the welcome's hint, the third is the backoff's again", () => {
  const p = new CrashPlan();
  const t0 = Date.now();
  p.arm(true, { after_ms: 4000, window_ms: 1000 }, () => 0.5);
  const w = p.waitMs(true);
  assert.ok(w !== undefined && w >= 4500 - (Date.now() - t0) - 5 && w <= 4500, `hinted wait ${w}`);
  assert.equal(p.waitMs(true), undefined, "after the hinted attempt, the backoff again");
  p.arm(true, { after_ms: 4000, window_ms: 1000 });
  assert.equal(p.waitMs(false), undefined, "an attempt that did not find the gateway away: no plan");
  p.arm(false, { after_ms: 4000, window_ms: 1000 });
  assert.equal(p.waitMs(true), undefined, "a close frame said why: no plan");
  p.arm(true, undefined);
  assert.equal(p.waitMs(true), undefined, "no hint: no plan");
});

test("toApiError: an error body's retry_after_ms wins over Retry-After and is marked hinted", async () => {
  const res = new Response(JSON.stringify({ error: { code: "unavailable", message: "starting", retryable: true, retry_after_ms: 1250 } }),
    { status: 503, headers: { "Retry-After": "2", "Content-Type": "application/json" } });
  const e = await toApiError(res);
  assert.equal(e.retryAfterMs, 1250);
  assert.equal(e.hinted, true);
  const plain = await toApiError(new Response("{}", { status: 503, headers: { "Retry-After": "2" } }));
  assert.equal(plain.retryAfterMs, 2000);
  assert.equal(plain.hinted, false);
});
