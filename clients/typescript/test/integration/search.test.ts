// Search against a real inboxd dev: words, a phrase, a prefix, the filters,
// paging with searchPages in both orders (each result once), and a blocked
// sender's messages left out.
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { randomUUID } from "node:crypto";
import { ApiError, Client, devToken, type SearchPage, type SearchQuery } from "../../src/index.js";
import { startDev, type Dev } from "./dev.js";

let dev: Dev;

before(async () => { dev = await startDev(); }, { timeout: 300_000 });
after(async () => { await dev?.stop(); });

test("search: words, phrases, prefixes, filters, pages, blocks", { timeout: 120_000 }, async () => {
  const tokens = new Map<number, string>();
  for (const u of [21, 22, 23]) tokens.set(u, await devToken(dev.url, u));
  const alice = await Client.create({ baseUrl: dev.url, token: tokens.get(21)! });
  const bob = await Client.create({ baseUrl: dev.url, token: tokens.get(22)! });
  const team = await alice.createConversation("team", [22, 23]);
  const pair = await alice.createConversation("pair", [22]);
  // Sent over HTTP and answered 201 once projected, so searchable at once.
  const send = async (user: number, cid: number, body: string, mentions?: number[]): Promise<number> => {
    const res = await fetch(`${dev.url}/v1/conversations/${cid}/messages`, {
      method: "POST",
      headers: { "Authorization": `Bearer ${tokens.get(user)}`, "Content-Type": "application/json" },
      body: JSON.stringify({ msg_id: randomUUID(), body, mentions }),
    });
    assert.equal(res.status, 201, await res.clone().text());
    return ((await res.json()) as { seq: number }).seq;
  };
  const fox = await send(22, team, "the quick brown fox jumps");
  const lunch = await send(22, team, "lunch at noon tomorrow?");
  const helloWorld = await send(22, team, "hello world");
  const helloThere = await send(23, team, "hello there");
  const peace = await send(22, pair, "world peace");
  const ping = await send(23, team, "ping about the release", [21]);
  const items: number[] = [];
  for (let i = 0; i < 25; i++) items.push(await send(21 + (i % 2), pair, `page item ${i}`));

  const hits = (p: SearchPage) => p.results.map((r) => [r.message.conversation_id, r.message.seq]);
  const find = async (q: SearchQuery) => hits(await alice.search(q));

  // Words, every one matching; newest first.
  assert.deepEqual(await find({ q: "fox quick" }), [[team, fox]]);
  assert.deepEqual(await find({ q: "world" }), [[pair, peace], [team, helloWorld]]);
  const hello = await alice.search({ q: "hello", prefix: false });
  assert.deepEqual(hits(hello), [[team, helloThere], [team, helloWorld]]);
  assert.equal(hello.estimated_total, 2);
  assert.equal(hello.next_cursor, undefined);
  assert.deepEqual(hello.results[0].snippet, [{ text: "hello", match: true }, { text: " there" }]);
  assert.equal(hello.results[0].message.body, "hello there");
  assert.ok(hello.results[0].rank > 0);
  // A phrase: its words in order, next to each other.
  assert.deepEqual(await find({ q: "\"brown fox\"" }), [[team, fox]]);
  assert.deepEqual(await find({ q: "\"quick fox\"" }), []);
  // The last word is a prefix unless prefix is false.
  assert.deepEqual(await find({ q: "noon lun" }), [[team, lunch]]);
  assert.deepEqual(await find({ q: "noon lun", prefix: false }), []);
  // Filters.
  assert.deepEqual(await find({ q: "hello", senderId: 23 }), [[team, helloThere]]);
  assert.deepEqual(await find({ q: "world", conversationId: pair }), [[pair, peace]]);
  assert.deepEqual(await find({ q: "release", mentionsMe: true }), [[team, ping]]);
  assert.deepEqual(await find({ q: "world", hasAttachment: true }), []);
  assert.deepEqual(await find({ q: "world", hasAttachment: false }), [[pair, peace], [team, helloWorld]]);
  assert.deepEqual(await find({ q: "item", conversationId: pair, afterSeq: items[2], beforeSeq: items[4] }), [[pair, items[3]]]);
  const all = (await alice.search({ q: "item", limit: 100 })).results;
  const mid = all[12].message.created_at;
  assert.deepEqual(await find({ q: "item", limit: 100, after: mid }),
    all.filter((r) => r.message.created_at > mid).map((r) => [r.message.conversation_id, r.message.seq]));
  assert.deepEqual(await find({ q: "item", limit: 100, before: new Date(Date.now() + 3600_000) }), hits({ results: all }));

  // Pages of 10: every item once, newest first; the total on the first page only.
  const sizes: number[] = [];
  const totals: (number | undefined)[] = [];
  const got: number[][] = [];
  for await (const page of alice.searchPages({ q: "page item", limit: 10 })) {
    sizes.push(page.results.length);
    totals.push(page.estimated_total);
    got.push(...hits(page));
  }
  assert.deepEqual(sizes, [10, 10, 5]);
  assert.deepEqual(totals, [25, undefined, undefined]);
  assert.deepEqual(got, [...items].reverse().map((s) => [pair, s]));
  // Relevance order pages the same set, highest rank first.
  const ranked: number[][] = [];
  let last = Infinity;
  for await (const page of alice.searchPages({ q: "item", order: "relevance", limit: 7 })) {
    for (const r of page.results) {
      assert.ok(r.rank <= last, "highest rank first");
      last = r.rank;
    }
    ranked.push(...hits(page));
  }
  assert.deepEqual(ranked.map(String).sort(), got.map(String).sort());

  // Refusals: the server's 400; a blank query never leaves.
  await assert.rejects(alice.search({ q: "item", afterSeq: 1 }), (err: unknown) => err instanceof ApiError && err.status === 400);
  await assert.rejects(alice.search({ q: "   " }), TypeError);

  // A blocked sender's messages never come back; another member still finds them.
  await alice.block(23);
  const end = Date.now() + 30_000;
  while ((await alice.blocks()).length === 0) {
    assert.ok(Date.now() < end, "the block listed");
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.deepEqual(await find({ q: "hello" }), [[team, helloWorld]]);
  assert.deepEqual(await find({ q: "release" }), []);
  assert.deepEqual(hits(await bob.search({ q: "hello" })), [[team, helloThere], [team, helloWorld]]);
});
