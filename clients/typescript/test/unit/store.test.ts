import { test } from "node:test";
import assert from "node:assert/strict";
import { mkdtemp, rm, stat, readFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { MemoryStore, emptyState, type Store, type State } from "../../src/store.js";
import { FileStore } from "../../src/node.js";

function sample(): State {
  const s = emptyState();
  s.epoch = 2;
  s.cursor = 17;
  s.conversations["5"] = { lastSeq: 9, recordVersion: 3, holes: [{ from: 1, to: 4 }] };
  s.outbox.push({ msgId: "0b6a2d8e-0000-4000-8000-000000000001", conversationId: 5, body: "hi", replyTo: 3, queuedAt: 1 });
  return s;
}

// One contract, run against every store.
async function contract(open: () => Promise<Store>) {
  const st = await open();
  assert.equal(await st.load(), undefined, "a new store is empty");
  const s = sample();
  await st.save(s);
  s.cursor = 99; // the store keeps its own copy
  assert.deepEqual(await st.load(), sample());
  const s2 = sample();
  s2.cursor = 18;
  await st.save(s2);
  assert.equal((await st.load())?.cursor, 18);
  await st.close?.();
}

test("store contract: MemoryStore", async () => {
  const m = new MemoryStore();
  await contract(async () => m);
});

test("store contract: FileStore, and the state survives reopening", async () => {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-"));
  try {
    const path = join(dir, "sub", "state.json");
    await contract(() => FileStore.open(path));
    const again = await FileStore.open(path);
    assert.equal((await again.load())?.cursor, 18);
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    await again.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("FileStore: a second open of the same file fails until the first is closed; a stale lock is taken over", async () => {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-"));
  try {
    const path = join(dir, "state.json");
    const a = await FileStore.open(path);
    await assert.rejects(FileStore.open(path), /already open/);
    await a.close();
    const b = await FileStore.open(path);
    await b.close();
    // a lock left by a process that is gone
    const { writeFile } = await import("node:fs/promises");
    await writeFile(path + ".lock", "999999999");
    const c = await FileStore.open(path);
    assert.equal((await readFile(path + ".lock", "utf8")).trim(), String(process.pid));
    await c.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});

test("FileStore: a file of another shape is an error, not a reset", async () => {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-"));
  try {
    const path = join(dir, "state.json");
    const { writeFile } = await import("node:fs/promises");
    await writeFile(path, JSON.stringify({ cursor: "x" }));
    const st = await FileStore.open(path);
    await assert.rejects(st.load(), /unknown shape/);
    await st.close();
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
});
