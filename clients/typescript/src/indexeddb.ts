/**
 * `@inboxd/client/indexeddb`: {@link IndexedDBStore}, the state in the
 * browser's IndexedDB, one record in one object store, written in one
 * transaction.
 *
 * @module @inboxd/client/indexeddb
 */
import { checkState, type State, type Store } from "./store.js";

const objectStore = "state";
const key = "client";

/**
 * IndexedDBStore keeps the state under one key of an IndexedDB database
 * (default name "inboxd"; use one database name per signed-in user). A put
 * in a readwrite transaction is atomic; save resolves when the transaction
 * completed (durability "strict" where the browser supports it). Tabs of the
 * same origin share the database: run one Client per user across tabs (a
 * Web Lock or a BroadcastChannel leader), or give each tab its own name.
 */
export class IndexedDBStore implements Store {
  private constructor(private readonly db: IDBDatabase) {}

  /**
   * open opens (or creates) the database and returns the store; close
   * closes it.
   *
   * @param name - the database's name: one per signed-in user.
   * @param factory - where the database lives: `globalThis.indexedDB` unless
   *   given (a test's fake).
   */
  static open(name = "inboxd", factory: IDBFactory = indexedDB): Promise<IndexedDBStore> {
    return new Promise((resolve, reject) => {
      const req = factory.open(name, 1);
      req.onupgradeneeded = () => req.result.createObjectStore(objectStore);
      req.onsuccess = () => resolve(new IndexedDBStore(req.result));
      req.onerror = () => reject(req.error ?? new Error("inboxd: indexedDB open failed"));
    });
  }

  async load(): Promise<State | undefined> {
    const stored = await new Promise<unknown>((resolve, reject) => {
      const tx = this.db.transaction(objectStore, "readonly");
      const req = tx.objectStore(objectStore).get(key);
      req.onsuccess = () => resolve(req.result);
      req.onerror = () => reject(req.error ?? new Error("inboxd: indexedDB load failed"));
    });
    return stored === undefined ? undefined : checkState(stored);
  }

  save(state: State): Promise<void> {
    return new Promise((resolve, reject) => {
      const tx = this.db.transaction(objectStore, "readwrite", { durability: "strict" });
      tx.objectStore(objectStore).put(structuredClone(state), key);
      tx.oncomplete = () => resolve();
      tx.onerror = () => reject(tx.error ?? new Error("inboxd: indexedDB save failed"));
      tx.onabort = () => reject(tx.error ?? new Error("inboxd: indexedDB save aborted"));
    });
  }

  async close(): Promise<void> {
    this.db.close();
  }
}
