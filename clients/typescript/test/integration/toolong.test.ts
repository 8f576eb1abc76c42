import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { Api } from "../../src/api.js";
import { Client, devToken, type Message, type TooLong } from "../../src/index.js";
import { startDev, type Dev } from "./dev.js";

let dev: Dev;

// A dev gateway whose too-long lag is 20 entries: a new device of a user with more gets a too_long.
before(async () => { dev = await startDev(["--too-long-lag", "20"]); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

test("too_long: a new device gets the holes, backfills the history once, then live entries", { timeout: 120_000 }, async () => {
  const aliceToken = await devToken(dev.url, 1);
  const alice = new Api({ baseUrl: dev.url, token: () => aliceToken });
  const cid = await alice.createConversation("long", [2]);
  for (let i = 1; i <= 30; i++) await alice.send(cid, { msg_id: crypto.randomUUID(), body: `h${i}` });

  const tooLongs: TooLong[] = [];
  const live: Message[] = [];
  const history: Message[] = [];
  const bob = await Client.create({
    baseUrl: dev.url, token: await devToken(dev.url, 2), transport: "polling", startupJitterMs: -1, longPollWaitSec: 1, backfillPage: 7,
    handlers: {
      onTooLong: (t) => { tooLongs.push(t); },
      onEntry: (e) => { if (e.message?.conversation_id === cid) live.push(e.message); },
      onHistory: (_cid, ms) => {
        assert.deepEqual(ms.map((m) => m.seq), ms.map((m) => m.seq).sort((a, b) => a - b), "a page comes ascending");
        history.push(...ms);
      },
    },
  });
  const run = bob.start();
  try {
    const texts = () => [...history, ...live].filter((m) => m.kind === "text").map((m) => m.body);
    const end = Date.now() + 30_000;
    while (tooLongs.length === 0 && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    assert.equal(tooLongs.length, 1, "one too_long");
    assert.ok(tooLongs[0].newHoles.some((h) => h.conversationId === cid));
    for (let i = 0; i < 20 && bob.holes(cid).length > 0; i++) await bob.backfill(cid);
    assert.deepEqual(bob.holes(cid), []);
    await alice.send(cid, { msg_id: crypto.randomUUID(), body: "after" });
    while (!texts().includes("after") && Date.now() < end) await new Promise((r) => setTimeout(r, 20));
    const got = texts();
    assert.equal(got.length, 31, `each message once: ${got.join(",")}`);
    assert.equal(new Set(got).size, 31);
  } finally {
    await bob.stop();
    await run;
  }
});
