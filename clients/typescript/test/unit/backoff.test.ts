import { test } from "node:test";
import assert from "node:assert/strict";
import { Backoff, CircuitBreaker, parseRetryAfter, jitterUp } from "../../src/backoff.js";

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
