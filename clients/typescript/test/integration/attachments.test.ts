// Attachments through the Client against a real inboxd dev, whose files
// live in its data dir on URLs the gateway signs: one client uploads a
// file (sealed on the way) and sends it with no text, the other gets the
// message with the file's description and downloads it; an image gets its
// thumbnail, which the other downloads once announced.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { deflateSync } from "node:zlib";
import WebSocket from "ws";
import { Client, devToken, type Entry, type WebSocketCtor } from "../../src/index.js";
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
    const up = await a.c.upload(cid, { name: "data.bin", contentType: "application/octet-stream", data: big });
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
