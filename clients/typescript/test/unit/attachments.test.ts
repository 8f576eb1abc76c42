import { test } from "node:test";
import assert from "node:assert/strict";
import { chunks, fromBase64Url, open, seal, sealedSize, thumbnailKey } from "../../src/attachments.js";

const hex = (b: Uint8Array) => Array.from(b, (x) => x.toString(16).padStart(2, "0")).join("");

// The vector of the Go package protocol/sealed (TestSealedVector): the same
// key and file seal to the same bytes in both languages.
test("seals as protocol/sealed does", async () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i);
  const file = Uint8Array.from({ length: 70000 }, (_, i) => (i * 7) % 251);
  const sealed = await seal(file, key);
  assert.equal(sealed.length, 70032);
  assert.equal(sealed.length, sealedSize(file.length));
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", sealed as BufferSource));
  assert.equal(hex(sum), "6ed1b597c26dfa228e7c984caff3f97e309e2eb4915095cd1e6b35b69963963a");
  assert.equal(hex(await thumbnailKey(key)), "d7715791d950342d31fbd9d9ca8bae1a64ea0227c6495fa548c0efdf2b13df63");
  assert.deepEqual(await open(sealed, file.length, key), file);
});

test("refuses what was changed, and opens every size", async () => {
  const key = crypto.getRandomValues(new Uint8Array(32));
  for (const size of [1, 65535, 65536, 65537, 200000]) {
    const file = crypto.getRandomValues(new Uint8Array(Math.min(size, 65536)));
    const full = new Uint8Array(size);
    for (let i = 0; i < size; i += file.length) full.set(file.subarray(0, Math.min(file.length, size - i)), i);
    const sealed = await seal(full, key);
    assert.equal(sealed.length, size + chunks(size) * 16);
    assert.deepEqual(await open(sealed, size, key), full);
  }
  const sealed = await seal(new Uint8Array(100000), key);
  const flipped = sealed.slice();
  flipped[10] ^= 1;
  await assert.rejects(open(flipped, 100000, key), /does not open/);
  await assert.rejects(open(sealed.subarray(0, 65552), 100000, key), /does not open/);
  await assert.rejects(open(sealed, 100000, crypto.getRandomValues(new Uint8Array(32))), /does not open/);
  assert.deepEqual(fromBase64Url("AAEC_-8"), Uint8Array.from([0, 1, 2, 255, 239]));
});
