// bench:backlog — how fast a fresh client applies a big backlog. Starts a real
// `inboxd dev` (too-long lag raised so that the backlog is synced entry by
// entry, the rate limits raised so that neither the generator nor the pages
// are throttled), makes an inbox of N entries for user 2 (user 1 sends to 2
// over many concurrent HTTP sends spread over several conversations), then
// times a fresh Client from cursor 0 to the head, for each store and
// transport asked, and prints entries/s.
//
//   npm run bench:backlog        # 50,000 entries; memory+websocket, memory+polling, file+websocket, file+websocket saving every 200
//   npm run bench:backlog -- --entries 20000 --runs memory:websocket,file:polling:50 --commit-every 1
//
// Not a test: it lives outside test/ so that `node --test dist/test/` never runs it.
import { cpus, loadavg, tmpdir } from "node:os";
import { mkdtemp, rm } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import WebSocket from "ws";
import { Api } from "../src/api.js";
import { Client, MemoryStore, devToken, type Store, type WebSocketCtor } from "../src/index.js";
import { FileStore } from "../src/node.js";
import { startDev, type Dev } from "../test/integration/dev.js";

const { values: opt } = parseArgs({
  options: {
    entries: { type: "string", default: "50000" },
    conversations: { type: "string", default: "20" },
    concurrency: { type: "string", default: "64" },
    // store:transport[:commitEvery], comma-separated
    runs: { type: "string", default: "memory:websocket,memory:polling,file:websocket,file:websocket:200" },
    "commit-every": { type: "string", default: "1" },
  },
});
const N = Number(opt.entries);
const convs = Number(opt.conversations);
const concurrency = Number(opt.concurrency);
const defaultCommitEvery = Number(opt["commit-every"]);

async function head(api: Api): Promise<number> {
  const res = await api.request("GET", "/v1/sync?after=0&limit=1", undefined);
  return ((await res.json()) as { head: number }).head;
}

async function makeBacklog(dev: Dev): Promise<number> {
  const t0 = Date.now();
  const aliceToken = await devToken(dev.url, 1);
  const alice = new Api({ baseUrl: dev.url, token: () => aliceToken, requestTimeoutMs: 60_000 });
  const bobToken = await devToken(dev.url, 2);
  const bob = new Api({ baseUrl: dev.url, token: () => bobToken });
  const cids: number[] = [];
  for (let i = 0; i < convs; i++) cids.push(await alice.createConversation(`backlog ${i}`, [2]));
  // A create may answer before its entries are in bob's inbox: wait for them to settle.
  let h = await head(bob);
  for (let last = -1; h !== last; ) {
    last = h;
    await new Promise((r) => setTimeout(r, 300));
    h = await head(bob);
  }
  const sends = N - h;
  if (sends < 0) throw new Error(`the conversations alone made ${h} entries, above ${N}`);
  let next = 0;
  let done = 0;
  const progress = setInterval(() => process.stderr.write(`\r  sent ${done}/${sends}`), 1000);
  await Promise.all(Array.from({ length: concurrency }, async () => {
    for (let i = next++; i < sends; i = next++) {
      await alice.send(cids[i % cids.length], { msg_id: crypto.randomUUID(), body: `backlog message ${i}` });
      done++;
    }
  }));
  clearInterval(progress);
  const end = Date.now() + 120_000;
  while ((h = await head(bob)) < N) {
    if (Date.now() > end) throw new Error(`bob's head stays at ${h}, below ${N}`);
    await new Promise((r) => setTimeout(r, 200));
  }
  const s = (Date.now() - t0) / 1000;
  console.log(`\nbacklog: ${h} entries for user 2 (${convs} conversations, ${sends} sends, concurrency ${concurrency}) in ${s.toFixed(1)} s: ${Math.round(sends / s)} sends/s`);
  return h;
}

async function timeRun(dev: Dev, target: number, storeKind: string, transport: "websocket" | "polling", commitEvery: number): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), "inboxd-ts-bench-"));
  let store: Store & { close?(): Promise<void> } = new MemoryStore();
  if (storeKind === "file") store = await FileStore.open(join(dir, "state.json"));
  else if (storeKind !== "memory") throw new Error(`unknown store ${storeKind}`);
  let count = 0;
  let last = 0;
  let bad = 0;
  let resolveDone!: () => void;
  const done = new Promise<void>((r) => { resolveDone = r; });
  const client = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, 2), store, transport, startupJitterMs: -1, commitEvery,
    WebSocket: WebSocket as unknown as WebSocketCtor,
    handlers: {
      onEntry: (e) => {
        if (e.inbox_seq !== last + 1) bad++;
        last = e.inbox_seq;
        if (++count >= target) resolveDone();
      },
      onTooLong: () => { throw new Error("too_long: raise --too-long-lag"); },
    },
  });
  const cpu0 = process.cpuUsage();
  const load0 = loadavg()[0];
  const t0 = performance.now();
  const running = client.start();
  try {
    await Promise.race([done, running.then(() => { throw new Error("the client stopped"); })]);
  } finally {
    const ms = performance.now() - t0;
    const cpu = process.cpuUsage(cpu0);
    await client.stop();
    await running.catch(() => undefined);
    await store.close?.();
    await rm(dir, { recursive: true, force: true });
    const cpuPct = ((cpu.user + cpu.system) / 1000 / ms) * 100;
    console.log(`${storeKind.padEnd(6)} ${transport.padEnd(9)} commitEvery=${commitEvery}: ${count} entries in ${(ms / 1000).toFixed(2)} s = ${Math.round(count / (ms / 1000))} entries/s` +
      ` (client process CPU ${cpuPct.toFixed(0)}% of one core; load average ${load0.toFixed(2)} -> ${loadavg()[0].toFixed(2)}; out of order: ${bad})`);
  }
}

const dev = await startDev(["--too-long-lag", String(10 * N), "--send-rate", "1000000", "--send-burst", "1000000",
  "--sync-rate", "1000000", "--sync-burst", "1000000"]);
try {
  console.log(`machine: ${cpus().length} x ${cpus()[0]?.model ?? "?"}, node ${process.version}; load average at start ${loadavg().map((l) => l.toFixed(2)).join(" ")}`);
  const target = await makeBacklog(dev);
  for (const r of opt.runs.split(",")) {
    const [storeKind, transport, every] = r.split(":") as [string, "websocket" | "polling" | undefined, string | undefined];
    await timeRun(dev, target, storeKind, transport ?? "websocket", every ? Number(every) : defaultCommitEvery);
  }
} finally {
  await dev.stop();
}
