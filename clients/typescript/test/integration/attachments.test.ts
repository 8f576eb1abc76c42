// Attachments through the Client against a real inboxd dev, whose files
// live in its data dir on URLs the gateway signs: one client uploads a
// file (sealed on the way) and sends it with no text, the other gets the
// message with the file's description and downloads it; an image gets its
// thumbnail, which the other downloads once announced. A file over
// MultipartThreshold goes in parts: an upload cut after its first part
// resumes from a fresh Client with only the second.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { deflateSync } from "node:zlib";
import WebSocket from "ws";
import { Client, MultipartThreshold, UploadError, devToken, type Entry, type FetchLike, type Upload, type WebSocketCtor } from "../../src/index.js";
import { startDev, type Dev } from "./dev.js";

let dev: Dev;

before(async () => { dev = await startDev(); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

async function waitFor(cond: () => boolean, ms: number, what: string): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

async function client(user: number, seen: Entry[]): Promise<{ c: Client; run: Promise<void> }> {
  const c = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, user), WebSocket: WebSocket as unknown as WebSocketCtor, startupJitterMs: -1,
    handlers: { onEntry: (e) => { seen.push(e); }, onUpdate: (m) => { seen.push({ kind: "update", message: m } as Entry); } },
  });
  return { c, run: c.start() };
}

// png is a w x h grey PNG (8-bit greyscale, no filter), made by hand.
function png(w: number, h: number): Uint8Array {
  const crcTable = Array.from({ length: 256 }, (_, n) => {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    return c >>> 0;
  });
  const crc = (b: Uint8Array) => {
    let c = 0xffffffff;
    for (const x of b) c = crcTable[(c ^ x) & 0xff] ^ (c >>> 8);
    return (c ^ 0xffffffff) >>> 0;
  };
  const chunk = (type: string, data: Uint8Array) => {
    const out = new Uint8Array(12 + data.length);
    const v = new DataView(out.buffer);
    v.setUint32(0, data.length);
    out.set(new TextEncoder().encode(type), 4);
    out.set(data, 8);
    v.setUint32(8 + data.length, crc(out.subarray(4, 8 + data.length)));
    return out;
  };
  const ihdr = new Uint8Array(13);
  const hv = new DataView(ihdr.buffer);
  hv.setUint32(0, w);
  hv.setUint32(4, h);
  ihdr[8] = 8; // bit depth
  ihdr[9] = 0; // greyscale
  const raw = new Uint8Array(h * (w + 1));
  for (let y = 0; y < h; y++) for (let x = 0; x < w; x++) raw[y * (w + 1) + 1 + x] = (x + y) & 0xff;
  const parts = [Uint8Array.from([137, 80, 78, 71, 13, 10, 26, 10]), chunk("IHDR", ihdr),
    chunk("IDAT", new Uint8Array(deflateSync(raw))), chunk("IEND", new Uint8Array())];
  const out = new Uint8Array(parts.reduce((n, p) => n + p.length, 0));
  let at = 0;
  for (const p of parts) { out.set(p, at); at += p.length; }
  return out;
}

test("upload, send, download and the thumbnail of an image", { timeout: 120_000 }, async () => {
  const seenA: Entry[] = [], seenB: Entry[] = [];
  const a = await client(31, seenA);
  const b = await client(32, seenB);
  try {
    const cid = await a.c.createConversation("files", [32]);
    const file = crypto.getRandomValues(new Uint8Array(65536)).slice();
    const big = new Uint8Array(150_000);
    for (let i = 0; i < big.length; i += file.length) big.set(file.subarray(0, Math.min(file.length, big.length - i)), i);
    const progress: [number, number][] = [];
    const up = await a.c.upload(cid, { name: "data.bin", contentType: "application/octet-stream", data: big,
      onProgress: (sent, total) => { progress.push([sent, total]); } });
    assert.equal(up.method, "PUT");
    assert.deepEqual(progress.at(-1), [up.sealed_size, up.sealed_size]);
    const id = await a.c.send(cid, "", { attachments: [up.id] });
    const sent = await a.c.waitSent(id);
    assert.equal(sent?.error, undefined);
    assert.equal(sent?.message?.attachments?.[0]?.id, up.id);

    await waitFor(() => seenB.some((e) => e.message?.msg_id === id), 30_000, "b gets the message");
    const att = seenB.find((e) => e.message?.msg_id === id)!.message!.attachments![0];
    assert.equal(att.name, "data.bin");
    assert.equal(att.size, big.length);
    assert.deepEqual(await b.c.download(cid, att), big);

    // An image: its thumbnail is announced (or comes with the message when read later).
    const image = png(640, 480);
    const photo = await a.c.upload(cid, { name: "grey.png", contentType: "image/png", data: image, width: 640, height: 480 });
    const pid = await a.c.send(cid, "a photo", { attachments: [photo.id] });
    await a.c.waitSent(pid);
    await waitFor(() => seenB.some((e) => e.message?.msg_id === pid && e.message.attachments?.[0]?.thumbnail !== undefined),
      60_000, "the thumbnail at b");
    const withThumb = seenB.find((e) => e.message?.msg_id === pid && e.message.attachments?.[0]?.thumbnail)!.message!.attachments![0];
    assert.deepEqual({ w: withThumb.thumbnail!.width, h: withThumb.thumbnail!.height }, { w: 320, h: 240 });
    const thumb = await b.c.downloadThumbnail(cid, withThumb);
    assert.deepEqual(Array.from(thumb.subarray(0, 3)), [0xff, 0xd8, 0xff], "a JPEG");
    assert.equal(thumb.length, withThumb.thumbnail!.size);
  } finally {
    await a.c.stop();
    await b.c.stop();
    await Promise.allSettled([a.run, b.run]);
  }
});

// random is n random bytes (getRandomValues gives at most 64 KiB a call).
function random(n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b;
}

// putCounter is a fetch that counts the PUTs to the store and, from the
// failAt-th on, fails them as a dropped connection would.
function putCounter(failAt = Infinity): { fetch: FetchLike; puts: () => number } {
  let puts = 0;
  return {
    puts: () => puts,
    fetch: (input, init) => {
      if (init?.method === "PUT" && ++puts >= failAt) return Promise.reject(new TypeError("fetch failed (injected)"));
      return globalThis.fetch(input, init);
    },
  };
}

test("a large upload in parts, cut after its first part, resumed from a fresh Client", { timeout: 180_000 }, async () => {
  const seenA: Entry[] = [], seenB: Entry[] = [];
  const a = await client(33, seenA);
  const b = await client(34, seenB);
  const token = await devToken(dev.url, 33);
  try {
    const cid = await a.c.createConversation("large files", [34]);
    const data = random(MultipartThreshold + 12345); // dev's parts are 8 MiB: two of them
    const file = { name: "large.bin", contentType: "application/octet-stream" };

    // The first try: part 1 goes, part 2's PUT fails; the file is a Blob, read a part at a time.
    const cut = putCounter(2);
    const first = await Client.create({ baseUrl: dev.url, token, fetch: cut.fetch });
    let created: Upload | undefined;
    let reportedBefore = -1;
    const progress: [number, number][] = [];
    const err = await first.upload(cid, { ...file, data: new Blob([data as BlobPart]),
      onCreated: (up) => { created = up; reportedBefore = progress.length; },
      onProgress: (sent, total) => { progress.push([sent, total]); } }).then(() => undefined, (e: unknown) => e);
    assert.ok(err instanceof UploadError, `an UploadError, not ${String(err)}`);
    assert.equal(err.id, created?.id);
    assert.equal(reportedBefore, 0, "onCreated before any byte");
    assert.equal(created?.method, "multipart");
    assert.deepEqual(created?.parts?.map((p) => p.number), [1, 2]);
    assert.equal(created?.parts_left, 2);
    assert.equal(cut.puts(), 2);
    const sealedSize = data.length + Math.ceil(data.length / 65536) * 16;
    assert.deepEqual(progress, [[128 * (65536 + 16), sealedSize]], "part 1 reported, part 2 not");

    // The resume, as after a restart of the app: only part 2 goes, then the completion.
    const again = putCounter();
    const second = await Client.create({ baseUrl: dev.url, token, fetch: again.fetch });
    const resumed: [number, number][] = [];
    const up = await second.resumeUpload(cid, err.id, { ...file, data, onProgress: (sent, total) => { resumed.push([sent, total]); } });
    assert.equal(up.state, "uploaded");
    assert.equal(up.sealed_size, sealedSize);
    assert.equal(again.puts(), 1, "only the part the store lacked");
    assert.deepEqual(resumed.at(-1), [sealedSize, sealedSize]);
    assert.equal((await second.resumeUpload(cid, err.id, { ...file, data })).state, "uploaded", "again: nothing to send");
    assert.equal(again.puts(), 1);
    await assert.rejects(second.resumeUpload(cid, err.id, { ...file, data: data.subarray(1) }), /bytes, not/);

    const id = await a.c.send(cid, "", { attachments: [err.id] });
    const sent = await a.c.waitSent(id);
    assert.equal(sent?.error, undefined);
    assert.equal((await second.resumeUpload(cid, err.id, { ...file, data })).state, "attached");
    assert.equal(again.puts(), 1);

    await waitFor(() => seenB.some((e) => e.message?.msg_id === id), 30_000, "b gets the message");
    const att = seenB.find((e) => e.message?.msg_id === id)!.message!.attachments![0];
    assert.equal(att.size, data.length);
    assert.ok(Buffer.from(await b.c.download(cid, att)).equals(Buffer.from(data)), "b downloads the same bytes");
  } finally {
    await a.c.stop();
    await b.c.stop();
    await Promise.allSettled([a.run, b.run]);
  }
});
