// inboxd demo page. The protocol is the SDK's (@inboxd/client, bundled as
// inboxd-client.js): it syncs the inbox over the WebSocket (long-polling
// when that fails), keeps (epoch, cursor), the holes and the outbox in
// IndexedDB (one database per user), sends with a msg_id retried until it
// has a seq, and makes every other request. This page only renders what the
// SDK hands over, and keeps a copy of what it drew (cache.js) so that a
// reload while offline still shows the conversations and the unsent
// messages (client.pending()). The tab's user is in sessionStorage, so two
// tabs can be two users; the "Go offline" switch stops the client (and
// survives a reload of the tab), "Go online" starts it again and shows how
// many entries the catch-up brought. Counts are in counts.js; typing,
// presence and read receipts in live.js; attachments (the composer's
// uploads, the messages' files and thumbnails) in files.js.
import { Client, IndexedDBStore, PermanentError, devToken } from './inboxd-client.js';
import { openCache } from './cache.js';
import { makeCounts } from './counts.js';
import { makeLive } from './live.js';
import { makeFiles } from './files.js';

const $ = (sel) => document.querySelector(sel);
const EMOJI = ['👍', '❤️', '😂', '🎉', '👀'];

const S = {
  user: 0,
  token: '',
  client: null, // the SDK's Client
  store: null, // its IndexedDBStore
  cache: null, // the view's copy (cache.js)
  convs: new Map(), // conversation_id -> record (counts kept by counts.js)
  msgs: new Map(), // conversation_id -> Map(seq -> message)
  loaded: new Set(), // conversations whose recent history was read this session
  current: 0,
  failed: [], // sends refused for good: {msgId, conversationId, body, error}
  bodies: new Map(), // msg_id -> body of the sends of this session (a refusal shows it)
  saving: new Map(), // "cid/seq" -> changes of that message not yet answered
  readSent: {}, // conversation_id -> the seq of the last read posted
  editing: null, // {cid, seq, draft}: the message being edited inline
  replyTo: 0, // the seq the next send answers, in the current conversation
  mode: 'offline', // offline | connecting | online | polling
  head: 0, // the server's head at the last welcome
  welcomeHead: 0, // a catch-up runs up to this inbox_seq
  caughtUp: 0, // entries it brought so far
};

const counts = makeCounts({ S, $ });
const live = makeLive({ S, $, log, renderView: () => renderSoon() });
const files = makeFiles({ S, $, log, renderView: () => renderSoon() });

// ---- small helpers ----

function log(text) {
  const li = document.createElement('li');
  li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
  const ol = $('#log');
  ol.prepend(li);
  while (ol.children.length > 200) ol.lastChild.remove();
}

// renderSoon draws the list, the view and the side panel once per burst
// of changes, in a task of its own: a message posted to itself (background
// tabs get no animation frames and throttle timers). Not a microtask: the
// SDK moves its cursor in a microtask after onEntry returned, and a render
// queued as one ran before that, showing the cursor one entry behind until
// something else drew the page.
let renderQueued = false;
const renderChannel = new MessageChannel();
renderChannel.port1.onmessage = () => {
  renderQueued = false;
  renderList();
  renderView();
  renderSync();
  counts.render();
};
function renderSoon() {
  if (renderQueued) return;
  renderQueued = true;
  renderChannel.port2.postMessage(null);
}

// renderSync shows the SDK's position in the side panel.
function renderSync() {
  const c = S.client;
  $('#epoch').textContent = c && c.epoch ? c.epoch : '-';
  $('#cursor').textContent = c ? c.cursor : '-';
  $('#head').textContent = S.head || '-';
  $('#outbox').textContent = c ? c.pending().length : 0;
}

// ---- the view's copy in IndexedDB ----

const dirty = new Set(); // conversations whose messages changed since the last save
let saveTimer = null;

// cacheSoon saves the list (and the changed conversations' messages) shortly.
function cacheSoon(cid) {
  if (cid) dirty.add(cid);
  if (saveTimer || !S.cache) return;
  saveTimer = setTimeout(() => {
    saveTimer = null;
    const msgs = new Map([...dirty].map((id) => [id, [...msgsOf(id).values()]]));
    dirty.clear();
    S.cache.save([...S.convs.values()], msgs).catch((e) => log(`cache: ${e.message}`));
  }, 100);
}

// restore shows what the page drew last time, before anything is fetched.
async function restore() {
  const { convs, msgs } = await S.cache.load();
  for (const c of convs) S.convs.set(c.conversation_id, c);
  for (const [cid, list] of msgs) for (const m of list) put(cid, m);
  renderSoon();
}

// ---- the conversation list ----

// loadList reads the whole list; its records replace those held, unless
// one held is newer.
async function loadList() {
  setList(await S.client.conversations());
}

// setList takes a snapshot of the list. The snapshot was read before it
// arrives: a record entry applied meanwhile (a read posted while the list
// was in flight) is newer than the snapshot's record and is kept, else the
// page would go back to the older read_seq and, having posted that read
// already, never post it again.
function setList(records) {
  const old = S.convs;
  S.convs = new Map(records.map((r) => {
    const held = old.get(r.conversation_id);
    if (held && held.version && r.version < held.version) return [r.conversation_id, held];
    return [r.conversation_id, counts.fresh({ ...r })];
  }));
  // Messages that arrived while the list was read count on top of it.
  for (const c of S.convs.values()) {
    const past = [...msgsOf(c.conversation_id).values()].filter((m) => m.seq > c.counted_seq);
    for (const m of past.sort((a, b) => a.seq - b.seq)) counts.message(c, m);
  }
  // A conversation open while its counts were read is read up to its end.
  if (S.current && S.convs.has(S.current)) markRead(S.current);
  if (old.size !== S.convs.size) log(`${S.convs.size} conversations`);
  cacheSoon();
  renderSoon();
}

let refreshTimer = null;
function refreshListSoon() {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    loadList().catch((e) => log(`list: ${e.message}`));
  }, 300);
}

const activity = (c) => (c.last_message ? Date.parse(c.last_message.created_at) || 0 : 0);

function renderList() {
  const ul = $('#convs');
  ul.replaceChildren();
  const convs = [...S.convs.values()].sort((a, b) =>
    (b.pinned - a.pinned) || (activity(b) - activity(a)) || (b.conversation_id - a.conversation_id));
  for (const c of convs) ul.append(listItem(c));
}

function listItem(c) {
  const li = document.createElement('li');
  li.dataset.cid = c.conversation_id;
  li.dataset.readSeq = c.read_seq || 0; // the record's, for tests
  li.dataset.lastSeq = c.last_seq || 0;
  if (c.conversation_id === S.current) li.classList.add('current');
  if (c.removed) li.classList.add('removed');
  const title = document.createElement('div');
  title.className = 'title';
  title.textContent = c.title || `#${c.conversation_id}`;
  const badge = counts.badge(c);
  if (badge) title.append(badge);
  const last = document.createElement('div');
  last.className = 'last';
  last.textContent = c.last_message ? describe(c.last_message) : '';
  li.append(title, last);
  li.addEventListener('click', () => open(c.conversation_id));
  return li;
}

// ---- messages held ----

function msgsOf(cid) {
  let m = S.msgs.get(cid);
  if (!m) {
    m = new Map();
    S.msgs.set(cid, m);
  }
  return m;
}

const versionOf = (m) => m.version || 1;

// put keeps a conversation's copy of m unless the copy is newer: entries
// and history carry a message as it was when read, and they race.
function put(cid, m) {
  const ms = msgsOf(cid);
  const old = ms.get(m.seq);
  if (!old || versionOf(m) >= versionOf(old)) ms.set(m.seq, m);
}

// The creator may delete any message of the conversation (moderation);
// seq 1 names it once the history is loaded.
function creatorOf(cid) {
  const first = msgsOf(cid).get(1);
  return first && first.kind === 'system' && first.body && first.body.event === 'conversation.created' ? first.body.by : 0;
}

function describe(m) {
  // A blocked sender's message comes only as a conversation's last message
  // (the SDK keeps the others from the page): say so instead of "".
  if (m.sender_blocked) return `${m.sender_id}: blocked message`;
  if (m.kind !== 'system') return `${m.sender_id}: ${m.deleted ? 'message deleted' : textOf(m)}`;
  const b = m.body || {};
  switch (b.event) {
    case 'conversation.created': return `user ${b.by} created "${b.title}"`;
    case 'member.added': return `user ${b.user_id} was added by ${b.by}`;
    case 'member.removed': return `user ${b.user_id} was removed by ${b.by}`;
    case 'member.role_set': return `user ${b.user_id} was made ${b.role} by ${b.by}`;
    case 'member.banned': case 'member.unbanned': case 'member.muted': case 'member.unmuted':
      return `user ${b.user_id} was ${b.event.slice('member.'.length)} by ${b.by}${b.until ? ' until ' + b.until : ''}`;
    default: return JSON.stringify(b);
  }
}

// textOf is a message's text, or what it attaches when it has none.
function textOf(m) {
  return !m.body && m.attachments && m.attachments.length ? files.names(m.attachments) : m.body;
}

// ---- a conversation ----

async function open(cid) {
  if (cid !== S.current) {
    S.editing = null;
    S.replyTo = 0;
    files.clearDraft(); // its uploads were for the other conversation
  }
  S.current = cid;
  sessionStorage.setItem('inboxd.current', String(cid)); // a reload opens it again
  const c = S.convs.get(cid);
  $('#view-title').textContent = c ? c.title || `#${cid}` : `#${cid}`;
  $('#compose-form').hidden = false;
  markRead(cid);
  renderSoon();
  live.opened(cid);
  $('#compose').focus();
  if (!S.loaded.has(cid)) await loadHistory(cid);
}

// loadHistory reads the newest page of a conversation (offline, the copy
// held is shown instead).
async function loadHistory(cid) {
  try {
    const res = await S.client.history(cid, 0, 50);
    for (const m of res.messages) put(cid, m);
    S.loaded.add(cid);
    cacheSoon(cid);
    if (S.current === cid) markRead(cid);
    renderSoon();
  } catch (e) {
    log(`history of ${cid}: ${e.message}`);
  }
}

// markRead: the open conversation shows its newest message, so it is read
// up to it (once per seq; a failed post is tried again on the next call).
function markRead(cid) {
  const c = S.convs.get(cid);
  if (!c || c.removed || !S.client) return;
  const last = Math.max(c.last_seq || 0, ...msgsOf(cid).keys());
  const sent = S.readSent[cid] || 0;
  if (!c.unread_count && !c.mention_count && last <= Math.max(c.read_seq || 0, sent)) return;
  counts.read(c);
  renderSoon();
  if (last <= sent) return;
  S.readSent[cid] = last;
  S.client.markRead(cid, last).catch((e) => {
    S.readSent[cid] = 0;
    log(`read ${cid}: ${e.message}`);
  });
}

// ---- drawing the open conversation ----

let seenNow = null; // live.seen of the conversation renderView shows

function renderView() {
  const box = $('#messages');
  // Stay where the reader is unless at the bottom: changes re-render
  // the whole list, and an edit may be open on an older message.
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const scrolled = box.scrollTop;
  const input = document.activeElement && document.activeElement.classList.contains('edit-input') ? document.activeElement : null;
  const caret = input ? [input.selectionStart, input.selectionEnd] : null;
  box.replaceChildren();
  renderReplyBar();
  files.beginRender();
  if (S.current) {
    seenNow = live.seen(S.current);
    box.append(...shownMessages(S.current), ...unsent(S.current));
  }
  files.endRender(); // revokes the object URLs of what is no longer shown
  if (!S.current) return;
  box.scrollTop = atBottom ? box.scrollHeight : scrolled;
  const edit = box.querySelector('.edit-input');
  if (edit && caret) {
    edit.focus();
    edit.setSelectionRange(caret[0], caret[1]);
  }
}

// shownMessages are the rows of the messages held, in seq order, with a
// marker where a loaded history skips seqs.
function shownMessages(cid) {
  const rows = [];
  const ms = msgsOf(cid);
  let prev = 0;
  for (const seq of [...ms.keys()].sort((a, b) => a - b)) {
    if (prev && seq > prev + 1 && S.loaded.has(cid)) {
      const hole = document.createElement('div');
      hole.className = 'msg system hole';
      hole.textContent = `… ${seq - prev - 1} not shown (before your time or not loaded)`;
      rows.push(hole);
    }
    prev = seq;
    const m = ms.get(seq);
    rows.push(messageEl(m, m.sender_id === S.user ? 'sent' : ''));
  }
  return rows;
}

// unsent are the rows of the SDK's outbox (pending) and of refused sends.
function unsent(cid) {
  const shown = new Set([...msgsOf(cid).values()].map((m) => m.msg_id));
  const rows = [];
  const row = (o, status, error) => messageEl({
    msg_id: o.msgId, sender_id: S.user, kind: 'text', body: o.body, reply_to: o.replyTo,
    attachments: files.sent.get(o.msgId),
  }, status, error, true);
  for (const o of S.client ? S.client.pending() : []) {
    if (o.conversationId === cid && !shown.has(o.msgId)) rows.push(row(o, 'pending'));
  }
  for (const f of S.failed) if (f.conversationId === cid) rows.push(row(f, 'failed', f.error));
  return rows;
}

// messageEl shows a message as it is now; outboxed is set for a send not
// yet in the conversation, which cannot be changed yet.
function messageEl(m, status, error, outboxed) {
  const cid = S.current;
  const div = document.createElement('div');
  div.className = 'msg';
  div.dataset.msgId = m.msg_id;
  if (m.seq) div.dataset.seq = m.seq;
  if (m.kind === 'system') div.classList.add('system');
  else if (m.sender_id === S.user) div.classList.add('mine');
  if (m.deleted) div.classList.add('deleted');
  if (m.sender_id !== S.user && counts.mentionsMe(m)) div.classList.add('mentioned');
  if (status) div.classList.add(status);
  if (m.reply_to) div.append(quoteEl(cid, m.reply_to));
  const editing = !outboxed && S.editing && S.editing.cid === cid && S.editing.seq === m.seq;
  div.append(editing ? editForm() : bodyEl(m));
  if (m.kind === 'system') return div;
  if (!m.deleted && m.attachments && m.attachments.length) div.append(outboxed ? files.pendingEl(m.attachments) : files.el(cid, m));
  div.append(metaEl(cid, m, error, outboxed));
  if (!outboxed && seenNow && seenNow.seq === m.seq) {
    const seen = document.createElement('div');
    seen.className = 'seen';
    seen.textContent = `seen by ${seenNow.users.join(', ')}`;
    div.append(seen);
  }
  if (outboxed || m.deleted) return div;
  if (m.reactions && m.reactions.length) div.append(reactionsEl(m));
  if (!editing) div.append(actionsEl(cid, m));
  return div;
}

function bodyEl(m) {
  const body = document.createElement('div');
  body.className = 'body';
  body.textContent = m.kind === 'system' ? describe(m) : (m.deleted ? 'message deleted' : m.body);
  return body;
}

// metaEl is the "user 2 · #12 (edited) · saving…" line.
function metaEl(cid, m, error, outboxed) {
  const meta = document.createElement('div');
  meta.className = 'meta';
  meta.textContent = m.seq ? `user ${m.sender_id} · #${m.seq}` : (error ? `failed: ${error}` : 'sending…');
  if (m.edited_at && !m.deleted) {
    const ed = document.createElement('span');
    ed.className = 'edited';
    ed.title = `edited ${new Date(m.edited_at).toLocaleString()}`;
    ed.textContent = ' (edited)';
    meta.append(ed);
  }
  if (!outboxed && S.saving.get(`${cid}/${m.seq}`)) meta.append(' · saving…');
  return meta;
}

function reactionsEl(m) {
  const rs = document.createElement('div');
  rs.className = 'reactions';
  for (const r of m.reactions) {
    const chip = button(`${r.emoji} ${r.count}`, 'react', 'chip');
    chip.dataset.emoji = r.emoji;
    if (r.me) {
      chip.classList.add('me');
      chip.title = 'your reaction: click to take it back';
    }
    rs.append(chip);
  }
  return rs;
}

function button(text, act, cls) {
  const b = document.createElement('button');
  b.type = 'button';
  b.textContent = text;
  b.dataset.act = act;
  if (cls) b.className = cls;
  return b;
}

// quoteEl is the "↩ #12 …" line of a reply, quoting the target when it
// is held.
function quoteEl(cid, seq) {
  const q = document.createElement('div');
  q.className = 'quote';
  const target = msgsOf(cid).get(seq);
  q.textContent = `↩ #${seq}${target ? ` ${describe(target)}` : ''}`;
  return q;
}

function actionsEl(cid, m) {
  const acts = document.createElement('div');
  acts.className = 'actions';
  acts.append(button('reply', 'reply', 'reply'));
  if (m.sender_id === S.user) acts.append(button('edit', 'edit', 'edit'));
  if (m.sender_id === S.user || creatorOf(cid) === S.user) acts.append(button('delete', 'delete', 'delete'));
  if (m.sender_id !== S.user) acts.append(button('report', 'report', 'report'));
  for (const e of EMOJI) {
    const b = button(e, 'react', 'pick');
    b.dataset.emoji = e;
    b.title = `react with ${e}`;
    acts.append(b);
  }
  return acts;
}

// ---- editing inline, replying ----

function editForm() {
  const form = document.createElement('form');
  form.className = 'edit-form';
  const input = document.createElement('input');
  input.className = 'edit-input';
  input.maxLength = 4096;
  input.value = S.editing.draft;
  input.addEventListener('input', () => { S.editing.draft = input.value; });
  input.addEventListener('keydown', (ev) => {
    if (ev.key === 'Escape') stopEditing();
  });
  const save = document.createElement('button');
  save.type = 'submit';
  save.className = 'save';
  save.textContent = 'Save';
  form.append(input, save, button('Cancel', 'cancel-edit', 'cancel'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    const { cid, seq } = S.editing;
    const m = msgsOf(cid).get(seq);
    const body = input.value;
    stopEditing();
    if (m && body && body !== m.body) change(cid, seq, 'edit', () => S.client.edit(cid, seq, body));
  });
  return form;
}

function startEditing(cid, m) {
  S.editing = { cid, seq: m.seq, draft: m.body };
  renderView();
  const input = $('#messages .edit-input');
  if (input) {
    input.focus();
    input.setSelectionRange(input.value.length, input.value.length);
  }
}

function stopEditing() {
  S.editing = null;
  renderView();
}

function renderReplyBar() {
  const m = S.replyTo ? msgsOf(S.current).get(S.replyTo) : null;
  $('#reply-bar').hidden = !S.replyTo;
  $('#reply-text').textContent = S.replyTo ? `↩ replying to #${S.replyTo}${m ? ` ${describe(m)}` : ''}` : '';
}

// A click on a message's buttons (the list is re-rendered often, so one
// listener on the box serves them all).
function onMessageClick(ev) {
  const b = ev.target.closest('button[data-act]');
  const el = b && b.closest('.msg[data-seq]');
  if (!el) return;
  const cid = S.current;
  const m = msgsOf(cid).get(Number(el.dataset.seq));
  if (!m) return;
  switch (b.dataset.act) {
    case 'reply':
      S.replyTo = m.seq;
      renderReplyBar();
      $('#compose').focus();
      break;
    case 'edit': startEditing(cid, m); break;
    case 'cancel-edit': stopEditing(); break;
    case 'delete': change(cid, m.seq, 'delete', () => S.client.delete(cid, m.seq)); break;
    case 'react': react(cid, m, b.dataset.emoji); break;
    case 'report': report(cid, m); break;
    case 'download': files.download(cid, m, b.closest('.attachment').dataset.id); break;
    default: break;
  }
}

// react: one reaction per user: the one shown as mine is taken back, any
// other replaces it.
function react(cid, m, emoji) {
  const mine = (m.reactions || []).find((r) => r.me);
  if (mine && mine.emoji === emoji) change(cid, m.seq, 'reaction removal', () => S.client.unreact(cid, m.seq));
  else change(cid, m.seq, `reaction ${emoji}`, () => S.client.react(cid, m.seq, emoji));
}

// report tells the deployment's moderators about someone else's message
// (docs/protocol.md, "Reports"); nobody else sees it.
async function report(cid, m) {
  $('#notice').textContent = '';
  try {
    await S.client.report(cid, m.seq, { reason: 'other', note: 'reported from the web demo' });
    $('#notice').textContent = `reported #${m.seq} to the moderators`;
  } catch (e) {
    $('#notice').textContent = `report of #${m.seq} refused: ${e.message}`;
  }
}

// ---- changes of a message ----

// change runs one of the SDK's change calls (edit, delete, react, unreact:
// it retries with the same change_id), shows "saving…" on the message
// until it is answered, and the message after the change when the answer
// carries it (else its update entry brings it).
async function change(cid, seq, what, run) {
  const key = `${cid}/${seq}`;
  S.saving.set(key, (S.saving.get(key) || 0) + 1);
  $('#notice').textContent = '';
  renderSoon();
  try {
    const res = await run();
    if (res && res.message) applyUpdate(res.message);
  } catch (e) {
    $('#notice').textContent = `${what} of #${seq} refused: ${e.message}`;
    log(`${what} of ${key}: ${e.message}`);
  } finally {
    const n = S.saving.get(key) - 1;
    if (n > 0) S.saving.set(key, n);
    else S.saving.delete(key);
    renderSoon();
  }
}

// ---- sends ----

// mentionsOf reads "@all" and "@<user id>" in a body: the send's options.
function mentionsOf(body) {
  const ids = [...body.matchAll(/(?:^|\s)@(\d+)\b/g)].map((x) => Number(x[1])).filter((n) => n > 0);
  const out = {};
  if (ids.length) out.mentions = [...new Set(ids)];
  if (/(?:^|\s)@all\b/.test(body)) out.mentionAll = true;
  return out;
}

// send queues a message in the SDK's outbox (saved before it resolves,
// offline too), with the uploads atts; onSendResult tells how it ended.
async function send(body, atts) {
  const opts = mentionsOf(body);
  if (S.replyTo) opts.replyTo = S.replyTo;
  S.replyTo = 0;
  if (atts.length) opts.attachments = atts.map((a) => a.id);
  try {
    const msgId = await S.client.send(S.current, body, opts);
    S.bodies.set(msgId, body);
    if (atts.length) files.sent.set(msgId, atts);
  } catch (e) {
    $('#notice').textContent = `not sent: ${e.message}`;
  }
  renderSoon();
}

// onSendResult: a send has its seq (shown at once, the entry follows with
// the whole message) or was refused for good.
function onSendResult(r) {
  if (r.message) {
    const m = r.message;
    const ms = msgsOf(m.conversation_id);
    if (!ms.has(m.seq)) {
      ms.set(m.seq, { sender_id: S.user, kind: 'text', created_at: new Date().toISOString(), ...m });
      cacheSoon(m.conversation_id);
    }
  } else if (r.error) {
    log(`send refused: ${r.error.message}`);
    S.failed.push({ msgId: r.msgId, conversationId: r.conversationId, body: S.bodies.get(r.msgId) || '', error: r.error.message });
  }
  renderSoon();
}

// ---- applying the inbox ----

// onEntry gets each inbox entry once, in order (the SDK moves the cursor
// after it returned).
function onEntry(e) {
  if (e.kind === 'message' && e.message) applyMessage(e.message);
  else if (e.kind === 'update' && e.message) applyUpdate(e.message);
  else if (e.kind === 'record' && e.record) applyRecord(e.record);
  catchUp(e.inbox_seq);
  if (S.current) markRead(S.current);
  renderSoon();
}

function applyMessage(m) {
  const cid = m.conversation_id;
  let c = S.convs.get(cid);
  if (!c) {
    c = { conversation_id: cid, title: '', last_seq: 0 };
    S.convs.set(cid, c);
    refreshListSoon(); // a conversation we did not know: its record follows
  }
  if (m.seq >= (c.last_seq || 0)) {
    c.last_seq = m.seq;
    c.last_message = m;
  }
  put(cid, m);
  counts.message(c, m);
  live.message(m);
  cacheSoon(cid);
}

// applyUpdate: a message changed: replace a copy held by a newer version.
// One not held is read as it is now when its history is loaded.
function applyUpdate(m) {
  const cid = m.conversation_id;
  const old = msgsOf(cid).get(m.seq);
  if (old && versionOf(m) > versionOf(old)) msgsOf(cid).set(m.seq, m);
  const c = S.convs.get(cid);
  if (c && c.last_message && c.last_message.seq === m.seq && versionOf(m) > versionOf(c.last_message)) c.last_message = m;
  cacheSoon(cid);
  renderSoon();
}

function applyRecord(r) {
  const old = S.convs.get(r.conversation_id);
  if (old && old.version && r.version < old.version) return;
  S.convs.set(r.conversation_id, counts.fresh(Object.assign({}, old, r)));
  cacheSoon();
}

// catchUp counts the entries a (re)connection brought up to the head its
// welcome named, and says so when the cursor reached it.
function catchUp(seq) {
  if (!S.welcomeHead || seq > S.welcomeHead) return;
  S.caughtUp++;
  if (seq < S.welcomeHead) return;
  $('#catchup').textContent = `caught up ${S.caughtUp} missed ${S.caughtUp === 1 ? 'entry' : 'entries'}`;
  log(`catch-up: ${S.caughtUp} entries`);
  S.welcomeHead = 0;
}

// onTooLong: the inbox jumped to the head; the histories held have holes,
// so they are forgotten and read again when a conversation is opened.
function onTooLong(t) {
  log(`too_long: jumping from ${t.previousCursor} to ${t.head}, refreshing the list`);
  S.welcomeHead = 0;
  S.msgs.clear();
  S.loaded.clear();
  S.cache.forget().catch(() => undefined);
  $('#catchup').textContent = 'too long offline: conversation list refreshed';
}

function onConversations(records) {
  setList(records);
  if (S.current) open(S.current);
}

// ---- the connection ----

const STATES = { connecting: 'connecting', waiting: 'connecting', circuit_open: 'connecting', stopped: 'offline' };

// onStatus shows the SDK's connection state: online over the WebSocket,
// polling when long-polling, offline when stopped.
function onStatus(s) {
  let mode = STATES[s.state] || 'connecting';
  if (s.state === 'connected') {
    mode = s.transport === 'websocket' ? 'online' : 'polling';
    connected(s.head);
  }
  setStatus(mode);
  if (s.state === 'stopped' && s.error) stopped(s.error);
}

// connected: a welcome (or a first poll answer) at head: what is missing
// up to it is the catch-up; members, presence and receipts are read again.
function connected(head) {
  if (typeof head === 'number') {
    S.head = head;
    S.caughtUp = 0;
    S.welcomeHead = head > S.client.cursor ? head : 0;
  }
  log(`connected: head ${head ?? '?'}, cursor ${S.client.cursor}`);
  live.connected();
  files.retry();
  refreshListSoon();
}

function setStatus(mode) {
  S.mode = mode;
  const el = $('#status');
  el.textContent = mode;
  el.className = `status ${mode}`;
  $('#net-toggle').textContent = wantOnline() ? 'Go offline' : 'Go online';
  live.renderMembers();
  renderSync();
}

// stopped: the client ended with a permanent error (a refused token, a
// store that failed): log out on a 401, else stay offline.
function stopped(err) {
  log(`stopped: ${err.message}`);
  if (err instanceof PermanentError && (err.status === 401 || err.closeCode === 4001)) logout('session expired, log in again');
}

// The switch's state is the tab's, so a reload keeps it.
const wantOnline = () => sessionStorage.getItem('inboxd.offline') !== '1';

function goOnline() {
  sessionStorage.removeItem('inboxd.offline');
  setStatus('connecting');
  S.client.start().catch(() => undefined); // onStatus tells how it ended
}

async function goOffline() {
  sessionStorage.setItem('inboxd.offline', '1');
  live.stopTyping();
  await S.client.stop();
  setStatus('offline');
  log(`offline at cursor ${S.client.cursor}`);
}

// ---- log in, start, log out ----

async function start() {
  $('#login').hidden = true;
  $('#app').hidden = false;
  $('#net-toggle').hidden = false;
  $('#logout-btn').hidden = false;
  $('#who').textContent = `user ${S.user}`;
  S.cache = await openCache(S.user);
  await restore();
  S.store = await IndexedDBStore.open(`inboxd-user-${S.user}`);
  S.client = await Client.create({
    baseUrl: location.origin, token: S.token, store: S.store,
    // A demo comes back quickly: short waits after failures, and the
    // WebSocket tried again 30 s after a fallback to long-polling.
    startupJitterMs: 300, backoffMaxMs: 5000, breakerCooldownMs: 5000, pollingPeriodMs: 30000,
    handlers: {
      onEntry, onTooLong, onConversations, onSendResult, onStatus,
      onHistory: (cid, ms) => ms.forEach((m) => put(cid, m)),
      onReceipt: (f) => live.onReceipt(f),
      onTyping: (f) => live.onTyping(f),
      onPresence: (f) => live.onPresence(f),
    },
  });
  const current = Number(sessionStorage.getItem('inboxd.current'));
  if (S.convs.has(current)) open(current);
  renderSoon();
  if (wantOnline()) goOnline();
  else setStatus('offline');
  loadList().catch((e) => log(`list: ${e.message}`));
}

async function logout(why) {
  sessionStorage.removeItem('inboxd.user');
  sessionStorage.removeItem('inboxd.offline');
  sessionStorage.removeItem('inboxd.current');
  if (S.user) localStorage.removeItem(`inboxd.${S.user}.token`);
  const { client, store, cache } = S;
  Object.assign(S, { user: 0, token: '', client: null, store: null, cache: null, current: 0, editing: null, replyTo: 0, failed: [] });
  S.convs.clear();
  S.msgs.clear();
  S.loaded.clear();
  S.saving.clear();
  S.readSent = {};
  live.reset();
  files.reset();
  $('#app').hidden = true;
  $('#login').hidden = false;
  $('#net-toggle').hidden = true;
  $('#logout-btn').hidden = true;
  $('#who').textContent = '';
  $('#login-error').textContent = why || '';
  setStatus('offline');
  if (client) await client.stop();
  if (store) await store.close();
  if (cache) cache.close();
}

async function login(ev) {
  ev.preventDefault();
  const id = Number($('#user-id').value);
  if (!(id > 0)) return;
  try {
    S.token = await devToken(location.origin, id);
    S.user = id;
    sessionStorage.setItem('inboxd.user', String(id));
    localStorage.setItem(`inboxd.${id}.token`, S.token);
    await start();
  } catch (e) {
    $('#login-error').textContent = `login failed: ${e.message} (is dev mode on?)`;
  }
}

async function create(ev) {
  ev.preventDefault();
  const members = $('#new-members').value.split(/[\s,]+/).filter(Boolean).map(Number).filter((n) => n > 0);
  try {
    const cid = await S.client.createConversation($('#new-title').value, members);
    $('#new-title').value = '';
    $('#new-members').value = '';
    log(`created conversation ${cid}`);
    await loadList();
    open(cid);
  } catch (e) {
    log(`create: ${e.message}`);
  }
}

// compose sends the text and the files uploaded for it; the text may be
// empty when a file is attached.
function compose(ev) {
  ev.preventDefault();
  if (!S.current || files.uploading()) return; // Send is disabled meanwhile
  const body = $('#compose').value;
  const atts = files.take();
  if (!body && !atts.length) return;
  $('#compose').value = '';
  live.stopTyping();
  send(body, atts);
}

// onDrop takes the files dropped on the open conversation.
function onDrop(ev) {
  if (!S.current || !ev.dataTransfer || !ev.dataTransfer.types.includes('Files')) return;
  ev.preventDefault();
  $('#view').classList.toggle('dropping', ev.type === 'dragover');
  if (ev.type === 'drop') files.add([...ev.dataTransfer.files]);
}

// ---- wiring ----

$('#login-form').addEventListener('submit', login);
$('#logout-btn').addEventListener('click', () => logout(''));
$('#net-toggle').addEventListener('click', () => (wantOnline() ? goOffline() : goOnline()));
$('#create-form').addEventListener('submit', create);
$('#compose-form').addEventListener('submit', compose);
$('#compose').addEventListener('input', () => live.typed());
$('#compose').addEventListener('blur', () => live.stopTyping());
$('#attach-input').addEventListener('change', (ev) => {
  files.add([...ev.target.files]);
  ev.target.value = ''; // the same file can be picked again
});
$('#compose').addEventListener('paste', (ev) => {
  const pasted = [...((ev.clipboardData && ev.clipboardData.files) || [])];
  if (!pasted.length) return;
  ev.preventDefault();
  files.add(pasted);
});
for (const type of ['dragover', 'drop']) $('#view').addEventListener(type, onDrop);
$('#view').addEventListener('dragleave', (ev) => {
  if (!$('#view').contains(ev.relatedTarget)) $('#view').classList.remove('dropping');
});
$('#messages').addEventListener('click', onMessageClick);
$('#reply-cancel').addEventListener('click', () => {
  S.replyTo = 0;
  renderReplyBar();
});

// Resume the tab's session: a reload keeps the user, the SDK's state and
// the view's copy.
const saved = Number(sessionStorage.getItem('inboxd.user'));
const token = saved > 0 && localStorage.getItem(`inboxd.${saved}.token`);
if (token) {
  S.user = saved;
  S.token = token;
  start().catch((e) => log(`start: ${e.message}`));
}
