// Typing, presence and read receipts of the demo (docs/websocket.md,
// "Typing and presence"; docs/protocol.md, "Read receipts"). None of it is
// in the inbox: receipts and presence are asked for over HTTP when a
// conversation is opened or the socket (re)connects, then follow the live
// frames; typing exists only in frames, each shown until its expires_in_ms.
// The open conversation shows its members with an online dot, who types,
// and "seen by" under the newest of the user's own messages others read.
// The SDK (S.client) makes the requests and hands over the frames: the
// app's onReceipt, onTyping and onPresence handlers call this module's.

export function makeLive({ S, $, log, renderView }) {
  const TYPING_EVERY_MS = 2000; // the server's TypingInterval
  const L = {
    members: new Map(), // conversation_id -> [user ids]
    receipts: new Map(), // conversation_id -> Map(user_id -> read_seq)
    presence: new Map(), // user_id -> {online, last_seen}
    typing: new Map(), // conversation_id -> Map(user_id -> expiry timer)
    sentAt: 0, // when this user's last typing start went out
    sentCid: 0, // and in which conversation
  };

  // listOf reads a list out of an answer: the list itself or its field.
  const listOf = (res, field) => (Array.isArray(res) ? res : (res && res[field]) || []);

  // ---- members and presence ----

  async function loadMembers(cid) {
    const ms = listOf(await S.client.members(cid), 'members');
    L.members.set(cid, ms.map((m) => m.user_id));
  }

  // loadPresence asks for the current state of users (at most 100, the
  // endpoint's bound); those it leaves out share no conversation any more.
  async function loadPresence(users) {
    const ids = users.filter((u) => u !== S.user).slice(0, 100);
    if (!ids.length) return;
    for (const p of listOf(await S.client.presence(ids), 'presence')) L.presence.set(p.user_id, p);
  }

  async function loadReceipts(cid) {
    const rs = listOf(await S.client.receipts(cid), 'receipts');
    L.receipts.set(cid, new Map(rs.map((r) => [r.user_id, r.read_seq])));
  }

  // refresh reads what the open conversation shows: its members, their
  // presence and their read positions.
  async function refresh(cid) {
    try {
      await loadMembers(cid);
      await Promise.all([loadPresence(L.members.get(cid)), loadReceipts(cid)]);
    } catch (e) {
      log(`members of ${cid}: ${e.message}`);
    }
    if (S.current === cid) render();
  }

  function renderMembers() {
    const box = $('#members');
    box.replaceChildren();
    for (const u of (S.current && L.members.get(S.current)) || []) {
      const p = L.presence.get(u);
      const online = u === S.user ? S.mode === 'online' : Boolean(p && p.online);
      const span = document.createElement('span');
      span.className = 'member';
      span.dataset.user = u;
      const dot = document.createElement('span');
      dot.className = `dot ${online ? 'online' : 'offline'}`;
      dot.title = online ? 'online' : (p && p.last_seen ? `last seen ${new Date(p.last_seen).toLocaleString()}` : 'offline');
      span.append(dot, u === S.user ? `${u} (you)` : `${u}`);
      box.append(span);
    }
  }

  function onPresence(f) {
    L.presence.set(f.user_id, { user_id: f.user_id, online: f.online, last_seen: f.last_seen });
    renderMembers();
  }

  // ---- receipts ----

  function onReceipt(f) {
    let rs = L.receipts.get(f.conversation_id);
    if (!rs) return; // not shown: read when the conversation is opened
    rs.set(f.user_id, Math.max(rs.get(f.user_id) || 0, f.read_seq));
    if (f.conversation_id === S.current) renderView();
  }

  // seen is what "seen by" shows in cid: the newest of the user's own
  // messages that other members have read, and who read it. Null if none.
  function seen(cid) {
    const rs = L.receipts.get(cid);
    if (!rs) return null;
    let best = 0;
    for (const [u, seq] of rs) if (u !== S.user) best = Math.max(best, seq);
    const own = [...(S.msgs.get(cid) || new Map()).values()]
      .filter((m) => m.sender_id === S.user && m.kind === 'text' && m.seq <= best)
      .sort((a, b) => b.seq - a.seq)[0];
    if (!own) return null;
    const users = [...rs].filter(([u, seq]) => u !== S.user && seq >= own.seq).map(([u]) => u).sort((a, b) => a - b);
    return { seq: own.seq, users };
  }

  // ---- typing ----

  // typed: the user typed in the composer. A start goes out at most every
  // TYPING_EVERY_MS; the server drops faster ones anyway.
  function typed() {
    const cid = S.current;
    if (!cid || !$('#compose').value) {
      stopTyping();
      return;
    }
    if (L.sentCid !== cid) stopTyping();
    if (Date.now() - L.sentAt < TYPING_EVERY_MS) return;
    if (S.client && S.client.sendTyping(cid)) {
      L.sentAt = Date.now();
      L.sentCid = cid;
    }
  }

  // stopTyping: sent, cleared or left the composer.
  function stopTyping() {
    if (!L.sentCid) return;
    if (S.client) S.client.sendTyping(L.sentCid, true);
    L.sentAt = 0;
    L.sentCid = 0;
  }

  function typingIn(cid) {
    let t = L.typing.get(cid);
    if (!t) {
      t = new Map();
      L.typing.set(cid, t);
    }
    return t;
  }

  function notTyping(cid, user) {
    const t = typingIn(cid);
    clearTimeout(t.get(user));
    if (t.delete(user) && cid === S.current) renderTyping();
  }

  function onTyping(f) {
    if (f.user_id === S.user) return;
    notTyping(f.conversation_id, f.user_id);
    if (f.stop || f.state === 'stop' || !(f.expires_in_ms > 0)) return;
    typingIn(f.conversation_id).set(f.user_id, setTimeout(() => notTyping(f.conversation_id, f.user_id), f.expires_in_ms));
    if (f.conversation_id === S.current) renderTyping();
  }

  function renderTyping() {
    const users = [...((S.current && L.typing.get(S.current)) || new Map()).keys()].sort((a, b) => a - b);
    const el = $('#typing');
    el.textContent = users.length === 0 ? '' :
      (users.length === 1 ? `user ${users[0]} is typing…` : `users ${users.join(', ')} are typing…`);
    el.hidden = users.length === 0;
  }

  // ---- hooks of app.js ----

  function render() {
    renderMembers();
    renderTyping();
    renderView();
  }

  // message: a message entry. Its sender no longer types; a member joined
  // or left the open conversation changes its members.
  function message(m) {
    notTyping(m.conversation_id, m.sender_id);
    const ev = m.kind === 'system' && m.body && m.body.event;
    if (m.conversation_id === S.current && (ev === 'member.added' || ev === 'member.removed')) refresh(m.conversation_id);
  }

  // opened: a conversation is shown.
  function opened(cid) {
    if (L.sentCid && L.sentCid !== cid) stopTyping();
    render();
    refresh(cid);
  }

  // connected: a welcome. What changed while away is asked for again.
  function connected() {
    renderMembers();
    if (S.current) refresh(S.current);
  }

  function reset() {
    for (const t of L.typing.values()) for (const timer of t.values()) clearTimeout(timer);
    L.members.clear();
    L.receipts.clear();
    L.presence.clear();
    L.typing.clear();
    L.sentAt = 0;
    L.sentCid = 0;
    renderMembers();
    renderTyping();
  }

  return { seen, typed, stopTyping, message, opened, connected, onReceipt, onTyping, onPresence, reset, renderMembers };
}
