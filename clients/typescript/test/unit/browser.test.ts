import { test } from "node:test";
import assert from "node:assert/strict";
import { readdir, readFile } from "node:fs/promises";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";

// The browser entries (@inboxd/client, @inboxd/client/indexeddb) must not
// reach Node's modules: only node.js (the @inboxd/client/node entry) may.
test("browser entries import nothing from node:", async () => {
  const src = join(dirname(fileURLToPath(import.meta.url)), "../../src");
  const files = (await readdir(src)).filter((f) => f.endsWith(".js") && f !== "node.js");
  assert.ok(files.includes("index.js") && files.includes("indexeddb.js"));
  for (const f of files) {
    const text = await readFile(join(src, f), "utf8");
    assert.doesNotMatch(text, /from\s+["']node:|import\(["']node:|require\(/, `${f} reaches Node`);
    assert.doesNotMatch(text, /from\s+["']\.\/node\.js["']/, `${f} imports the Node entry`);
  }
});
