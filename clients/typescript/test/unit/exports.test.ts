import { test } from "node:test";
import assert from "node:assert/strict";
import { readFile } from "node:fs/promises";
import { fileURLToPath } from "node:url";
import { defaults } from "../../src/client.js";

// The package's public API is what its entry points export; everything else
// is internal (@internal) and reachable only from inside the package. These
// lists make a new export a deliberate change: add it here, and to
// docs/client-typescript.md ("What is public"). Types are erased at run
// time, so they are read from src/index.ts; typedoc's validation (npm run
// docs:check) fails when a public signature names a type no entry point
// exports.

// The main entry's values (its run-time exports).
const main = [
  "ApiError", "Client", "HandlerError", "KindMessage", "KindRecord", "KindUpdate", "MemoryStore",
  "MultipartThreshold", "PermanentError", "StoreError", "UploadError", "devToken", "emptyState",
];

// The main entry's types (src/index.ts's `type` exports).
const mainTypes = [
  "Attachment", "BackfillResult", "Block", "Change", "ChangeKind", "ChangeOptions", "ChangeResult", "ClientConfig", "ClientHandlers",
  "ConversationSettings", "ConversationState", "Counts", "Entry", "FetchLike", "Handlers", "History", "Hole", "Member", "Message",
  "OutboxItem", "Presence", "Reaction", "Receipt", "ReceiptEvent", "Record", "Report", "ReportOptions", "ReportResult", "Sanction", "SearchOrder", "SearchPage", "SearchQuery", "SearchResult",
  "SendOptions", "SendResult", "Settings", "SettingsPatch", "SnippetPart", "State", "Status", "Store", "Thumbnail", "TokenSource", "TooLong", "Transport", "TypingEvent",
  "Upload", "UploadFile", "UploadPart", "WebSocketCtor", "WebSocketLike",
];

// The entry points by their package.json "exports" keys, imported by the
// package's own name (Node resolves a package's self-reference through its
// exports map), so the map is checked too.
const entries: { [entry: string]: string[] } = {
  ".": main,
  "./node": [...main, "FileStore"],
  "./indexeddb": ["IndexedDBStore"],
};

const packageJson = JSON.parse(await readFile(new URL("../../../package.json", import.meta.url), "utf8")) as {
  name: string;
  exports: { [entry: string]: unknown };
};

test("package.json exports exactly the listed entry points", () => {
  assert.deepEqual(Object.keys(packageJson.exports).sort(), Object.keys(entries).sort());
});

for (const [entry, expected] of Object.entries(entries)) {
  const specifier = packageJson.name + entry.slice(1);
  test(`${specifier} exports its public API only`, async () => {
    const mod = (await import(specifier)) as object;
    assert.deepEqual(Object.keys(mod).sort(), [...expected].sort());
  });
}

test("src/index.ts exports the listed types and values", async () => {
  const src = await readFile(fileURLToPath(new URL("../../../src/index.ts", import.meta.url)), "utf8");
  const values: string[] = [];
  const types: string[] = [];
  for (const m of src.matchAll(/^export (type )?\{([^}]*)\} from/gm)) {
    for (const name of m[2].split(",").map((n) => n.trim()).filter(Boolean)) {
      if (m[1] || name.startsWith("type ")) types.push(name.replace(/^type /, ""));
      else values.push(name);
    }
  }
  assert.doesNotMatch(src, /^export \*/m, "src/index.ts re-exports a whole module");
  assert.deepEqual(values.sort(), [...main].sort());
  assert.deepEqual(types.sort(), [...mainTypes].sort());
});

// docs/client-typescript.md lists the public names ("What is public").
test("docs/client-typescript.md lists what is public", async () => {
  const doc = await readFile(fileURLToPath(new URL("../../../../../docs/client-typescript.md", import.meta.url)), "utf8");
  const section = /\n## What is public\n([\s\S]*?)\n## /.exec(doc)?.[1];
  assert.ok(section, "no section \"What is public\"");
  const named = new Set([...section.matchAll(/`([A-Za-z]\w*)`/g)].map((m) => m[1]));
  assert.deepEqual([...named].sort(), [...main, ...mainTypes, "FileStore", "IndexedDBStore"].sort());
});

// The browser bundle (web/static/inboxd-client.js, scripts/bundle.mjs) is
// src/browser.ts: the main entry and IndexedDBStore in one module. The web
// demo and the Go browser tests import from it.
test("the browser bundle's entry exports the main entry and IndexedDBStore", async () => {
  const mod = (await import("../../src/browser.js")) as object;
  assert.deepEqual(Object.keys(mod).sort(), [...main, "IndexedDBStore"].sort());
});

// Editors show a field's JSDoc, not a trailing comment: every default of
// ClientConfig is a `@defaultValue` on its field, and must be the one the
// client uses.
test("ClientConfig's @defaultValue tags are the client's defaults", async () => {
  const src = await readFile(fileURLToPath(new URL("../../../src/client.ts", import.meta.url)), "utf8");
  const body = /export interface ClientConfig \{([\s\S]*?)\n\}/.exec(src)?.[1];
  assert.ok(body, "ClientConfig not found in src/client.ts");
  const documented = new Map<string, string | undefined>();
  for (const m of body.matchAll(/\/\*\*([\s\S]*?)\*\/\s*(\w+)\??:/g)) {
    const tag = /@defaultValue\s+(.+)/.exec(m[1])?.[1]?.trim();
    documented.set(m[2], tag);
  }
  for (const [field, value] of Object.entries(defaults)) {
    if (field === "baseUrl") continue; // required: no default
    assert.ok(documented.has(field), `ClientConfig.${field} has no doc comment`);
    assert.equal(documented.get(field), JSON.stringify(value), `ClientConfig.${field}'s @defaultValue`);
  }
  for (const field of ["store", "WebSocket", "fetch"]) {
    assert.ok(documented.get(field), `ClientConfig.${field} has no @defaultValue`);
  }
});

// docs/client-typescript.md ("Configuration") names every knob, and only knobs.
test("docs/client-typescript.md names ClientConfig's fields", async () => {
  const doc = await readFile(fileURLToPath(new URL("../../../../../docs/client-typescript.md", import.meta.url)), "utf8");
  const section = /\n## Configuration\n([\s\S]*?)\n## /.exec(doc)?.[1];
  assert.ok(section, "no section \"Configuration\"");
  const named = new Set([...section.matchAll(/`([a-z]\w*)`/g)].map((m) => m[1]));
  for (const v of ["auto", "websocket", "polling"]) named.delete(v); // transport's values
  const knobs = Object.keys(defaults).filter((k) => k !== "baseUrl");
  assert.deepEqual([...named].sort(), knobs.sort());
});
