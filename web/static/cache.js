// The demo's rendered view in IndexedDB, one database per user
// ("inboxd-demo-<user id>"): the conversation list and the newest messages
// it has shown of each conversation. It is only a copy of what the page
// drew, so that a reload while offline still shows it; the sync state
// (cursor, epoch, holes, the outbox) is the SDK's, in its own database.
const KEEP = 200; // messages kept per conversation

// openCache opens (creating) the user's view database.
export function openCache(userId) {
  return new Promise((resolve, reject) => {
    const req = indexedDB.open(`inboxd-demo-${userId}`, 1);
    req.onupgradeneeded = () => {
      req.result.createObjectStore('convs', { keyPath: 'conversation_id' });
      req.result.createObjectStore('msgs'); // conversation id -> [messages]
    };
    req.onsuccess = () => resolve(new Cache(req.result));
    req.onerror = () => reject(req.error);
  });
}

// done resolves when a transaction completed.
const done = (tx) => new Promise((resolve, reject) => {
  tx.oncomplete = () => resolve();
  tx.onerror = () => reject(tx.error);
  tx.onabort = () => reject(tx.error || new Error('aborted'));
});

class Cache {
  constructor(db) {
    this.db = db;
  }

  // load reads the whole view: {convs: [records], msgs: Map(cid -> [messages])}.
  async load() {
    const tx = this.db.transaction(['convs', 'msgs'], 'readonly');
    const all = (req) => new Promise((resolve) => { req.onsuccess = () => resolve(req.result); });
    const [convs, keys, lists] = await Promise.all([
      all(tx.objectStore('convs').getAll()),
      all(tx.objectStore('msgs').getAllKeys()),
      all(tx.objectStore('msgs').getAll()),
    ]);
    await done(tx);
    return { convs, msgs: new Map(keys.map((k, i) => [k, lists[i]])) };
  }

  // save writes the conversation list and the messages of the conversations
  // in msgs (Map cid -> [messages]) in one transaction.
  save(convs, msgs) {
    const tx = this.db.transaction(['convs', 'msgs'], 'readwrite');
    const cs = tx.objectStore('convs');
    cs.clear();
    for (const c of convs) cs.put(c);
    for (const [cid, list] of msgs) {
      tx.objectStore('msgs').put([...list].sort((a, b) => a.seq - b.seq).slice(-KEEP), cid);
    }
    return done(tx);
  }

  // forget drops every conversation's messages (after a too-long).
  forget() {
    const tx = this.db.transaction('msgs', 'readwrite');
    tx.objectStore('msgs').clear();
    return done(tx);
  }

  close() {
    this.db.close();
  }
}
