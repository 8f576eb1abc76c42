// The browser bundle's entry (web/static/inboxd-client.js, built by
// `npm run bundle`): the main entry and the IndexedDB store in one ES module.
export * from "./index.js";
export { IndexedDBStore } from "./indexeddb.js";
