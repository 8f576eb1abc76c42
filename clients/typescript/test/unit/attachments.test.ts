import { test } from "node:test";
import assert from "node:assert/strict";
import { ChunkSize, chunks, fromBase64Url, open, partOf, parts, seal, sealChunks, sealedSize, thumbnailKey } from "../../src/attachments.js";

// random is n random bytes (getRandomValues gives at most 64 KiB a call).
function random(n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b;
}

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

// A multipart upload's parts are sealed one at a time (sealChunks over the
// chunks partOf names): put end to end they are the whole file sealed, the
// Go vector's bytes included, so the object the store joins opens as one.
test("parts sealed one at a time make the whole sealed file", async () => {
  const key = Uint8Array.from({ length: 32 }, (_, i) => i);
  const file = Uint8Array.from({ length: 70000 }, (_, i) => (i * 7) % 251);
  const first = await sealChunks(file.subarray(0, ChunkSize), file.length, 0, 1, key);
  const last = await sealChunks(file.subarray(ChunkSize), file.length, 1, 1, key);
  const joined = new Uint8Array(first.length + last.length);
  joined.set(first);
  joined.set(last, first.length);
  const sum = new Uint8Array(await crypto.subtle.digest("SHA-256", joined));
  assert.equal(hex(sum), "6ed1b597c26dfa228e7c984caff3f97e309e2eb4915095cd1e6b35b69963963a");

  const k = crypto.getRandomValues(new Uint8Array(32));
  const partSize = 2 * ChunkSize;
  for (const size of [1, ChunkSize, partSize, partSize + 1, 3 * partSize - 5, 5 * partSize]) {
    const f = random(size);
    const whole = await seal(f, k);
    const got = new Uint8Array(whole.length);
    let at = 0;
    for (let n = 1; n <= parts(size, partSize); n++) {
      const rg = partOf(size, partSize, n);
      assert.equal(rg.offset, at, `part ${n} of ${size}: offset`);
      const sealedPart = await sealChunks(f.subarray(rg.first * ChunkSize, Math.min(size, (rg.first + rg.count) * ChunkSize)),
        size, rg.first, rg.count, k);
      assert.equal(sealedPart.length, rg.length, `part ${n} of ${size}: length`);
      got.set(sealedPart, at);
      at += sealedPart.length;
    }
    assert.equal(at, sealedSize(size));
    assert.deepEqual(got, whole, `${size} bytes`);
  }
  await assert.rejects(sealChunks(file.subarray(0, 10), file.length, 0, 1, key), /not 10/);
  await assert.rejects(sealChunks(file, file.length, 1, 2, key), /chunks 1\+2 of 2/);
});

// As protocol/sealed's PartOf: every part but the last holds part_size/ChunkSize
// whole chunks, and the parts' sealed bytes follow one another to the end.
test("partOf says which chunks a part holds, as protocol/sealed does", () => {
  const mib = 1 << 20;
  const size = 8 * mib + 12345; // two parts of 8 MiB: 128 chunks and 1
  assert.equal(parts(size, 8 * mib), 2);
  assert.deepEqual(partOf(size, 8 * mib, 1), { first: 0, count: 128, offset: 0, length: 128 * (ChunkSize + 16) });
  assert.deepEqual(partOf(size, 8 * mib, 2), { first: 128, count: 1, offset: 128 * (ChunkSize + 16), length: 12345 + 16 });
  assert.equal(partOf(size, 8 * mib, 1).length + partOf(size, 8 * mib, 2).length, sealedSize(size));
  assert.deepEqual(partOf(1, 5 * mib, 1), { first: 0, count: 1, offset: 0, length: 17 });
  assert.deepEqual(partOf(10 * mib, 5 * mib, 2), { first: 80, count: 80, offset: 80 * (ChunkSize + 16), length: 80 * (ChunkSize + 16) });
  assert.equal(parts(10 * mib, 5 * mib), 2);
  assert.equal(parts(10 * mib + 1, 5 * mib), 3);
  assert.equal(parts(100, 1000), 0, "a part size that is not a multiple of the chunk size");
  assert.throws(() => partOf(size, 8 * mib, 0), /part 0/);
  assert.throws(() => partOf(size, 8 * mib, 3), /part 3/);
  assert.throws(() => partOf(size, 1000, 1), /part 1/);
});
