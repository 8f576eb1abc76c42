import { test } from "node:test";
import assert from "node:assert/strict";
import { Client } from "../../src/client.js";
import { ApiError } from "../../src/errors.js";
import { FakeServer } from "./fakeserver.js";

const message = { conversation_id: 3, seq: 9, msg_id: "m", sender_id: 1, kind: "text", body: "x", created_at: new Date(0).toISOString(), version: 2 };

async function client(srv: FakeServer): Promise<Client> {
  return Client.create({ baseUrl: "http://fake", token: "t", fetch: (i, init) => srv.fetch(i, init), backoffInitialMs: 5, backoffMaxMs: 20 });
}

test("change: a temporary failure (503, 429 with Retry-After) is retried with the same change_id", async () => {
  const srv = new FakeServer();
  srv.script = [{ status: 503 }, { status: 429, headers: { "Retry-After": "0" } }, { status: 200, body: message }];
  const c = await client(srv);
  const r = await c.edit(3, 9, "x");
  assert.equal(r.pending, false);
  assert.equal(r.message?.version, 2);
  assert.equal(srv.requests.length, 3);
  const ids = srv.requests.map((q) => (q.body as { change_id: string }).change_id);
  assert.ok(ids[0] && ids.every((id) => id === ids[0]) && id(r) === ids[0], "one change_id for every attempt");
  assert.deepEqual(srv.requests.map((q) => `${q.method} ${q.path}`), Array(3).fill("PATCH /v1/conversations/3/messages/9"));
});

const id = (r: { change: { changeId: string } }) => r.change.changeId;

test("change: a refusal is not retried; 202 is pending; each kind has its request", async () => {
  const srv = new FakeServer();
  srv.script = [{ status: 403, body: { error: { code: "forbidden", message: "not yours", retryable: false } } }];
  const c = await client(srv);
  await assert.rejects(c.delete(3, 9), (err: unknown) => err instanceof ApiError && err.status === 403 && err.code === "forbidden");
  assert.equal(srv.requests.length, 1);
  srv.script = [{ status: 202, body: { change_id: "c", status: "pending" } }, { status: 200, body: message }, { status: 200, body: message }];
  const p = await c.react(3, 9, "👍");
  assert.equal(p.pending, true);
  assert.equal(p.message, undefined);
  await c.applyChange(p.change); // again with its change_id
  await c.unreact(3, 9);
  assert.deepEqual(srv.requests.slice(1).map((q) => `${q.method} ${q.path}`), [
    "PUT /v1/conversations/3/messages/9/reaction", "PUT /v1/conversations/3/messages/9/reaction", "DELETE /v1/conversations/3/messages/9/reaction"]);
  assert.equal((srv.requests[2].body as { change_id: string }).change_id, id(p));
  assert.deepEqual(srv.requests[1].body, { change_id: id(p), emoji: "👍" });
  await assert.rejects(c.edit(0, 9, "x"), TypeError);
  await assert.rejects(c.edit(3, 9, ""), TypeError);
});

test("change: retries end at the timeout with the last error", async () => {
  const srv = new FakeServer();
  srv.script = Array.from({ length: 100 }, () => ({ status: 503 }));
  const c = await client(srv);
  await assert.rejects(c.edit(3, 9, "x", { timeoutMs: 60 }), (err: unknown) => err instanceof ApiError && err.status === 503);
  assert.ok(srv.requests.length >= 2, `${srv.requests.length} attempts`);
});
