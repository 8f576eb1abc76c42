// Client.upload and resumeUpload on a fake fetch that plays the gateway and
// the store: the answer's method decides (multipart though not asked), the
// parts a GET lists next, the sealed bytes of each part, progress, and
// which errors are an UploadError.
import { test } from "node:test";
import assert from "node:assert/strict";
import { ApiError, Client, MultipartThreshold, UploadError, type FetchLike, type Upload, type UploadPart } from "../../src/index.js";
import { ChunkSize, fromBase64Url, open, partOf, parts, sealedSize } from "../../src/attachments.js";

const key = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8"; // bytes 0..31
const base = "http://gw.test";

function random(n: number): Uint8Array {
  const b = new Uint8Array(n);
  for (let i = 0; i < n; i += 65536) crypto.getRandomValues(b.subarray(i, Math.min(n, i + 65536)));
  return b;
}

interface Call { method: string; url: string; body?: unknown }

// gateway answers as a multipart upload of size bytes in parts of
// partSize, listing at most perAnswer missing parts; the store keeps the
// parts PUT (failing the numbers in failParts once).
function gateway(size: number, partSize: number, perAnswer: number, failParts: number[] = []) {
  const calls: Call[] = [];
  const stored = new Map<number, Uint8Array>();
  let completed = false;
  const n = parts(size, partSize);
  const describe = (): Upload => {
    const missing = Array.from({ length: n }, (_, i) => i + 1).filter((p) => !stored.has(p));
    const up: Upload = { id: "u1", conversation_id: 7, name: "f.bin", content_type: "application/octet-stream", size,
      sealed_size: sealedSize(size), chunk_size: ChunkSize, method: "multipart", headers: {}, expires_at: "2026-01-02T00:00:00Z",
      state: completed ? "uploaded" : "open", part_size: partSize };
    if (!completed) {
      up.key = key;
      up.parts = missing.slice(0, perAnswer).map((p): UploadPart => ({ number: p, size: partOf(size, partSize, p).length,
        url: `${base}/store/u1/${p}`, headers: { "X-Part": String(p) } }));
      up.parts_left = missing.length;
    }
    return up;
  };
  const json = (status: number, body: unknown) => new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
  const fetch: FetchLike = async (url, init) => {
    const method = init?.method ?? "GET";
    const path = new URL(url).pathname;
    const body = init?.body instanceof Uint8Array ? init.body : typeof init?.body === "string" ? JSON.parse(init.body) as unknown : undefined;
    calls.push({ method, url: path, body });
    if (method === "POST" && path === "/v1/conversations/7/uploads") return json(201, describe());
    if (method === "GET" && path === "/v1/conversations/7/uploads/u1") return json(200, describe());
    if (method === "POST" && path === "/v1/conversations/7/uploads/u1/complete") {
      if (stored.size < n) return json(400, { error: { code: "bad_request", message: "parts missing", retryable: false } });
      completed = true;
      return json(200, describe());
    }
    const m = /^\/store\/u1\/(\d+)$/.exec(path);
    if (method === "PUT" && m) {
      const p = Number(m[1]);
      assert.equal((init?.headers as Record<string, string>)["X-Part"], String(p), "the part's headers");
      assert.equal((init?.headers as Record<string, string>).Authorization, undefined, "no token to the store");
      if (failParts.includes(p)) {
        failParts.splice(failParts.indexOf(p), 1);
        return new Response("", { status: 500 });
      }
      stored.set(p, body as Uint8Array);
      return new Response("", { status: 200 });
    }
    return json(404, { error: { code: "not_found", message: path, retryable: false } });
  };
  const object = () => {
    const out = new Uint8Array(sealedSize(size));
    for (let p = 1; p <= n; p++) out.set(stored.get(p)!, partOf(size, partSize, p).offset);
    return out;
  };
  return { fetch, calls, object };
}

test("multipart though not asked: the listed parts, the next ones a GET lists, then complete", async () => {
  const size = 5 * 2 * ChunkSize - 100; // five parts of two chunks
  const g = gateway(size, 2 * ChunkSize, 2);
  const c = await Client.create({ baseUrl: base, token: "t", fetch: g.fetch });
  const data = random(size);
  const progress: number[] = [];
  const up = await c.upload(7, { name: "f.bin", contentType: "application/octet-stream", data: new Blob([data as BlobPart]),
    onProgress: (sent, total) => { assert.equal(total, sealedSize(size)); progress.push(sent); } });
  assert.equal(up.state, "uploaded");
  assert.equal((g.calls[0].body as { multipart?: boolean }).multipart, undefined, "below MultipartThreshold: not asked");
  assert.deepEqual(g.calls.map((k) => `${k.method} ${k.url}`), [
    "POST /v1/conversations/7/uploads", "PUT /store/u1/1", "PUT /store/u1/2",
    "GET /v1/conversations/7/uploads/u1", "PUT /store/u1/3", "PUT /store/u1/4",
    "GET /v1/conversations/7/uploads/u1", "PUT /store/u1/5",
    "POST /v1/conversations/7/uploads/u1/complete",
  ]);
  assert.equal(progress.at(-1), sealedSize(size));
  assert.deepEqual(await open(g.object(), size, fromBase64Url(key)), data, "the parts joined open to the file");
});

test("a failed part is an UploadError; resumeUpload sends only what is missing", async () => {
  const size = 3 * 2 * ChunkSize;
  const g = gateway(size, 2 * ChunkSize, 100, [2]);
  const c = await Client.create({ baseUrl: base, token: "t", fetch: g.fetch });
  const data = random(size);
  const file = { name: "f.bin", contentType: "application/octet-stream", data };
  let created = "";
  const err = await c.upload(7, { ...file, onCreated: (up) => { created = up.id; } }).then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof UploadError);
  assert.equal(err.id, "u1");
  assert.equal(created, "u1");
  assert.match(err.message, /part 2: the store answered 500/);
  assert.deepEqual(g.calls.filter((k) => k.method === "PUT").map((k) => k.url), ["/store/u1/1", "/store/u1/2"], "stops at the failure");

  g.calls.length = 0;
  await assert.rejects(c.resumeUpload(7, "u1", { ...file, data: data.subarray(1) }), (e: unknown) => !(e instanceof UploadError) && /bytes, not/.test(String(e)));
  g.calls.length = 0;
  const up = await c.resumeUpload(7, "u1", file);
  assert.equal(up.state, "uploaded");
  assert.deepEqual(g.calls.map((k) => `${k.method} ${k.url}`), [
    "GET /v1/conversations/7/uploads/u1", "PUT /store/u1/2", "PUT /store/u1/3", "POST /v1/conversations/7/uploads/u1/complete",
  ]);
  assert.deepEqual(await open(g.object(), size, fromBase64Url(key)), data);
  g.calls.length = 0;
  assert.equal((await c.resumeUpload(7, "u1", file)).state, "uploaded");
  assert.deepEqual(g.calls.map((k) => k.method), ["GET"], "uploaded already: nothing sent");
});

test("multipart asked from MultipartThreshold; a refusal before the upload exists stays an ApiError", async () => {
  const calls: unknown[] = [];
  const fetch: FetchLike = async (_url, init) => {
    calls.push(JSON.parse(init?.body as string));
    return new Response(JSON.stringify({ error: { code: "payload_too_large", message: "too large", retryable: false } }), { status: 413 });
  };
  const c = await Client.create({ baseUrl: base, token: "t", fetch });
  const big = new Blob([new Uint8Array(MultipartThreshold)]);
  const err = await c.upload(7, { name: "f.bin", contentType: "application/octet-stream", data: big }).then(() => undefined, (e: unknown) => e);
  assert.ok(err instanceof ApiError && !(err instanceof UploadError), String(err));
  assert.equal(err.status, 413);
  assert.deepEqual(calls, [{ name: "f.bin", content_type: "application/octet-stream", size: MultipartThreshold, multipart: true }]);
});
