// inboxd demo client. It follows docs/protocol.md's client rules:
// - (epoch, cursor), each conversation's last seq and the outbox persist in
//   localStorage, per user; the tab's user is in sessionStorage, so two tabs
//   can be two users;
// - it connects after a random startup delay, reconnects with capped
//   exponential backoff and full jitter, resets the backoff only after a
//   stable period, honours retry_after_ms and close codes (4001 and 4003 stop),
//   and falls back to long-polling (with _polling) when the WebSocket keeps
//   failing, trying the WebSocket again later;
// - entries are applied in inbox_seq order; an entry that skips ahead, or a
//   heartbeat head past the cursor, waits briefly and then pulls after=cursor
//   over HTTP; on too_long it jumps to the head, refreshes the conversation
//   list and forgets the loaded histories (holes are backfilled when a
//   conversation is opened);
// - sends are retried with the same msg_id until they have a seq or a
//   permanent error, and queue while offline;
// - a message's changes (edit, delete, reaction) go out the way sends do,
//   each with its change_id, retried with it until change_ack or a
//   permanent error; what they change arrives as inbox entries of kind
//   "update", applied when their version is higher than the one shown.
// Counts (badges and totals) are in counts.js; typing, presence and read
// receipts in live.js.
'use strict';

(() => {
  const $ = (sel) => document.querySelector(sel);

  const BACKOFF_BASE = 500;
  const BACKOFF_CAP = 30000;
  const STABLE_MS = 10000;
  const CIRCUIT_FAILURES = 6;
  const POLL_FOR_MS = 60000;
  const PULL_DELAY_MS = 700;
  const EMOJI = ['👍', '❤️', '😂', '🎉', '👀'];

  const S = {
    user: 0,
    token: '',
    epoch: null,
    cursor: 0,
    head: 0,
    convs: new Map(), // conversation_id -> record (counts kept by counts.js)
    msgs: new Map(), // conversation_id -> Map(seq -> message)
    loaded: new Set(), // conversations whose recent history was loaded
    convSeq: {}, // conversation_id -> last seq seen (persisted)
    current: 0,
    outbox: [], // {msg_id, conversation_id, body, reply_to, mentions, mention_all, status, error}
    readSent: {}, // conversation_id -> the seq of the last read posted
    // Changes of messages not yet acknowledged, by change_id: {type,
    // change_id, conversation_id, seq, body | emoji}. Unlike the outbox they
    // are not persisted: a reload forgets an unsent edit.
    changes: new Map(),
    editing: null, // {cid, seq, draft}: the message being edited inline
    replyTo: 0, // the seq the next send answers, in the current conversation
    ws: null,
    mode: 'offline', // offline | connecting | online | polling
    wantOnline: false,
    attempt: 0,
    failures: 0,
    stableTimer: null,
    reconnectTimer: null,
    pullTimer: null,
    pulling: false,
    retryAfterMs: 0,
    welcomeHead: 0,
    caughtUp: 0,
    pollAbort: null,
    wsRetryAt: 0,
  };

  // ---- persistence ----

  const key = (k) => `inboxd.${S.user}.${k}`;
  const load = (k, def) => {
    try {
      const v = localStorage.getItem(key(k));
      return v === null ? def : JSON.parse(v);
    } catch (e) {
      return def;
    }
  };
  const save = (k, v) => localStorage.setItem(key(k), JSON.stringify(v));
  const saveCursor = () => {
    save('epoch', S.epoch);
    save('cursor', S.cursor);
    save('convseq', S.convSeq);
    $('#epoch').textContent = S.epoch ?? '-';
    $('#cursor').textContent = S.cursor;
    $('#head').textContent = S.head;
  };
  const saveOutbox = () => {
    save('outbox', S.outbox);
    $('#outbox').textContent = S.outbox.filter((o) => o.status === 'pending').length;
  };

  // ---- small helpers ----

  const log = (text) => {
    const li = document.createElement('li');
    li.textContent = `${new Date().toLocaleTimeString()} ${text}`;
    const ol = $('#log');
    ol.prepend(li);
    while (ol.children.length > 200) ol.lastChild.remove();
  };

  const setStatus = (mode) => {
    S.mode = mode;
    const el = $('#status');
    el.textContent = mode;
    el.className = `status ${mode}`;
    $('#net-toggle').textContent = S.wantOnline ? 'Go offline' : 'Go online';
    live.renderMembers();
  };

  const uuid = () => {
    if (crypto.randomUUID) return crypto.randomUUID();
    const b = crypto.getRandomValues(new Uint8Array(16));
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    const h = [...b].map((x) => x.toString(16).padStart(2, '0')).join('');
    return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
  };

  const counts = window.inboxdCounts({ S, $ });
  const live = window.inboxdLive({ S, $, api, log, renderView: () => renderView(), wsSend: (f) => wsSend(f) });

  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  // Full jitter over a capped exponential.
  const backoff = () => {
    const d = Math.random() * Math.min(BACKOFF_CAP, BACKOFF_BASE * 2 ** S.attempt);
    S.attempt = Math.min(S.attempt + 1, 16);
    return d;
  };

  class APIError extends Error {
    constructor(status, body, retryAfter) {
      super(body?.error?.message || `HTTP ${status}`);
      this.status = status;
      this.code = body?.error?.code;
      this.retryable = status === 0 || body?.error?.retryable === true;
      this.retryAfter = retryAfter;
    }
  }

  async function api(method, path, body, signal) {
    let res;
    try {
      res = await fetch(path, {
        method,
        signal,
        headers: Object.assign({ Authorization: `Bearer ${S.token}` },
          body === undefined ? {} : { 'Content-Type': 'application/json' }),
        body: body === undefined ? undefined : JSON.stringify(body),
      });
    } catch (e) {
      if (e.name === 'AbortError') throw e;
      throw new APIError(0, null, 1);
    }
    let data = null;
    if (res.status !== 304) {
      try {
        data = await res.json();
      } catch (e) {
        data = null;
      }
    }
    if (!res.ok) {
      const err = new APIError(res.status, data, Number(res.headers.get('Retry-After') || 1));
      if (res.status === 401) logout('session expired, log in again');
      throw err;
    }
    return data;
  }

  // ---- the conversation list ----

  async function loadList() {
    let page = null;
    let first = true;
    let head = 0;
    const fresh = new Map();
    for (;;) {
      const q = `/v1/conversations?limit=200${page ? `&page=${encodeURIComponent(page)}` : ''}`;
      const res = await api('GET', q);
      if (first) {
        first = false;
        // The head is read before the list: start from it on a first run
        // or a new epoch; a stored cursor of this epoch catches up instead.
        if (S.epoch !== res.epoch || S.cursor === null) {
          S.epoch = res.epoch;
          S.cursor = res.inbox_head;
          S.head = res.inbox_head;
          saveCursor();
        }
        head = res.inbox_head;
      }
      for (const r of res.conversations) fresh.set(r.conversation_id, r);
      if (!res.next_page) break;
      page = res.next_page;
    }
    S.convs = fresh;
    counts.listed(head, fresh.values());
    renderList();
  }

  let refreshSoon = null;
  const refreshListSoon = () => {
    if (refreshSoon) return;
    refreshSoon = setTimeout(() => {
      refreshSoon = null;
      loadList().catch((e) => log(`list: ${e.message}`));
    }, 300);
  };

  const activity = (c) => (c.last_message ? Date.parse(c.last_message.created_at) : 0);

  function renderList() {
    const ul = $('#convs');
    ul.replaceChildren();
    const convs = [...S.convs.values()].sort((a, b) =>
      (b.pinned - a.pinned) || (activity(b) - activity(a)) || (b.conversation_id - a.conversation_id));
    for (const c of convs) {
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
      ul.append(li);
    }
  }

  // ---- a conversation ----

  const msgsOf = (cid) => {
    let m = S.msgs.get(cid);
    if (!m) {
      m = new Map();
      S.msgs.set(cid, m);
    }
    return m;
  };

  const versionOf = (m) => m.version || 1;

  // put keeps a conversation's copy of m unless the copy is newer: entries
  // and history carry a message as it was when read, and they race.
  const put = (cid, m) => {
    const ms = msgsOf(cid);
    const old = ms.get(m.seq);
    if (!old || versionOf(m) >= versionOf(old)) ms.set(m.seq, m);
  };

  // The creator may delete any message of the conversation (moderation);
  // seq 1 names it once the history is loaded.
  const creatorOf = (cid) => {
    const first = msgsOf(cid).get(1);
    return first && first.kind === 'system' && first.body && first.body.event === 'conversation.created' ? first.body.by : 0;
  };

  function describe(m) {
    if (m.kind !== 'system') return `${m.sender_id}: ${m.deleted ? 'message deleted' : m.body}`;
    const b = m.body || {};
    switch (b.event) {
      case 'conversation.created': return `user ${b.by} created "${b.title}"`;
      case 'member.added': return `user ${b.user_id} was added by ${b.by}`;
      case 'member.removed': return `user ${b.user_id} was removed by ${b.by}`;
      default: return JSON.stringify(b);
    }
  }

  async function open(cid) {
    if (cid !== S.current) {
      S.editing = null;
      S.replyTo = 0;
    }
    S.current = cid;
    const c = S.convs.get(cid);
    $('#view-title').textContent = c ? c.title || `#${cid}` : `#${cid}`;
    $('#compose-form').hidden = false;
    markRead(cid);
    renderList();
    live.opened(cid);
    if (!S.loaded.has(cid)) {
      try {
        const res = await api('GET', `/v1/conversations/${cid}/messages?limit=50`);
        for (const m of res.messages) put(cid, m);
        S.loaded.add(cid);
        if (S.current === cid) {
          markRead(cid);
          renderView();
        }
      } catch (e) {
        log(`history of ${cid}: ${e.message}`);
      }
    }
    $('#compose').focus();
  }

  // markRead: the open conversation shows its newest message, so it is read
  // up to it (once per seq; a failed post is tried again on the next call).
  function markRead(cid) {
    const c = S.convs.get(cid);
    if (!c || c.removed) return;
    const last = Math.max(c.last_seq || 0, ...msgsOf(cid).keys());
    const unread = c.unread_count || c.mention_count;
    const sent = S.readSent[cid] || 0;
    if (!unread && last <= Math.max(c.read_seq || 0, sent)) return;
    counts.read(c);
    counts.render();
    renderList();
    if (last <= sent) return;
    S.readSent[cid] = last;
    api('POST', `/v1/conversations/${cid}/read`, { seq: last }).catch((e) => {
      S.readSent[cid] = 0;
      log(`read ${cid}: ${e.message}`);
    });
  }

  function renderView() {
    const box = $('#messages');
    // Stay where the reader is unless at the bottom: changes re-render
    // the whole list, and an edit may be open on an older message.
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
    const scrolled = box.scrollTop;
    const input = document.activeElement && document.activeElement.classList.contains('edit-input') ? document.activeElement : null;
    const caret = input ? [input.selectionStart, input.selectionEnd] : null;
    box.replaceChildren();
    if (!S.current) {
      renderReplyBar();
      return;
    }
    const seqs = [...msgsOf(S.current).keys()].sort((a, b) => a - b);
    seenNow = live.seen(S.current);
    let prev = 0;
    for (const seq of seqs) {
      const m = msgsOf(S.current).get(seq);
      if (prev && seq > prev + 1 && S.loaded.has(S.current)) {
        const hole = document.createElement('div');
        hole.className = 'msg system hole';
        hole.textContent = `… ${seq - prev - 1} not shown (before your time or not loaded)`;
        box.append(hole);
      }
      prev = seq;
      box.append(messageEl(m, m.sender_id === S.user ? 'sent' : ''));
    }
    for (const o of S.outbox) {
      if (o.conversation_id !== S.current || msgById(o.conversation_id, o.msg_id)) continue;
      box.append(messageEl({ msg_id: o.msg_id, seq: o.seq, sender_id: S.user, kind: 'text', body: o.body, reply_to: o.reply_to }, o.status, o.error, true));
    }
    box.scrollTop = atBottom ? box.scrollHeight : scrolled;
    renderReplyBar();
    const edit = box.querySelector('.edit-input');
    if (edit && caret) {
      edit.focus();
      edit.setSelectionRange(caret[0], caret[1]);
    }
  }

  let seenNow = null; // live.seen of the conversation renderView shows

  // messageEl shows a message as it is now; outboxed is set for a send of
  // the outbox not yet in the conversation, which cannot be changed yet.
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
    if (editing) {
      div.append(editForm());
    } else {
      const body = document.createElement('div');
      body.className = 'body';
      body.textContent = m.kind === 'system' ? describe(m) : (m.deleted ? 'message deleted' : m.body);
      div.append(body);
    }
    if (m.kind === 'system') return div;
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
    if (!outboxed && [...S.changes.values()].some((c) => c.conversation_id === cid && c.seq === m.seq)) {
      meta.append(' · saving…');
    }
    div.append(meta);
    if (!outboxed && seenNow && seenNow.seq === m.seq) {
      const seen = document.createElement('div');
      seen.className = 'seen';
      seen.textContent = `seen by ${seenNow.users.join(', ')}`;
      div.append(seen);
    }
    if (outboxed || m.deleted) return div;
    if (m.reactions && m.reactions.length) {
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
      div.append(rs);
    }
    if (!editing) div.append(actionsEl(cid, m));
    return div;
  }

  const button = (text, act, cls) => {
    const b = document.createElement('button');
    b.type = 'button';
    b.textContent = text;
    b.dataset.act = act;
    if (cls) b.className = cls;
    return b;
  };

  // quoteEl is the "↩ #12 …" line of a reply, quoting the target when it
  // is loaded.
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
    for (const e of EMOJI) {
      const b = button(e, 'react', 'pick');
      b.dataset.emoji = e;
      b.title = `react with ${e}`;
      acts.append(b);
    }
    return acts;
  }

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
      if (m && body && body !== m.body) change('edit', cid, seq, { body });
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
  $('#messages').addEventListener('click', (ev) => {
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
      case 'edit':
        startEditing(cid, m);
        break;
      case 'cancel-edit':
        stopEditing();
        break;
      case 'delete':
        change('delete', cid, m.seq, {});
        break;
      case 'react': {
        // One reaction per user: the one shown as mine is taken back,
        // any other replaces it.
        const mine = (m.reactions || []).find((r) => r.me);
        change('react', cid, m.seq, { emoji: mine && mine.emoji === b.dataset.emoji ? '' : b.dataset.emoji });
        break;
      }
      default:
        break;
    }
  });

  const msgById = (cid, id) => [...msgsOf(cid).values()].find((m) => m.msg_id === id);

  // ---- applying the inbox ----

  function apply(e) {
    if (e.kind === 'message' && e.message) {
      const m = e.message;
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
      S.convSeq[cid] = Math.max(S.convSeq[cid] || 0, m.seq);
      counts.message(c, e);
      live.message(m);
      const i = S.outbox.findIndex((o) => o.msg_id === m.msg_id);
      if (i >= 0) {
        S.outbox.splice(i, 1);
        saveOutbox();
      }
    } else if (e.kind === 'update' && e.message) {
      // A message changed: replace a copy we hold by a newer version. One
      // we do not hold is read as it is now when its history is loaded.
      const m = e.message;
      const old = msgsOf(m.conversation_id).get(m.seq);
      if (old && versionOf(m) > versionOf(old)) msgsOf(m.conversation_id).set(m.seq, m);
      const c = S.convs.get(m.conversation_id);
      if (c && c.last_message && c.last_message.seq === m.seq && versionOf(m) > versionOf(c.last_message)) c.last_message = m;
    } else if (e.kind === 'record' && e.record) {
      const r = e.record;
      const old = S.convs.get(r.conversation_id);
      if (!old || !old.version || r.version >= old.version) {
        S.convs.set(r.conversation_id, counts.record(old, r, e));
      }
    }
  }

  function onEntries(entries, head) {
    let gap = false;
    for (const e of entries) {
      if (e.inbox_seq <= S.cursor) continue; // already applied (a pull overlapped)
      if (e.inbox_seq > S.cursor + 1) {
        gap = true;
        break;
      }
      apply(e);
      S.cursor = e.inbox_seq;
      if (S.welcomeHead && e.inbox_seq <= S.welcomeHead) S.caughtUp++;
    }
    S.head = Math.max(S.head, head || 0);
    saveCursor();
    if (S.welcomeHead && S.cursor >= S.welcomeHead) {
      if (S.caughtUp > 0) {
        $('#catchup').textContent = `caught up ${S.caughtUp} missed ${S.caughtUp === 1 ? 'entry' : 'entries'}`;
        log(`catch-up: ${S.caughtUp} entries`);
      }
      S.welcomeHead = 0;
    }
    if (gap) schedulePull();
    if (S.current) markRead(S.current);
    counts.render();
    renderList();
    renderView();
  }

  async function onTooLong(f) {
    log(`too_long: jumping from ${S.cursor} to ${f.head}, refreshing the list`);
    S.epoch = f.epoch;
    S.cursor = f.head;
    S.head = f.head;
    S.welcomeHead = 0;
    saveCursor();
    // Every loaded history may now have holes: backfill lazily.
    S.msgs.clear();
    S.loaded.clear();
    // Acked sends whose entries fell into the jump are done.
    S.outbox = S.outbox.filter((o) => o.status !== 'sent');
    saveOutbox();
    counts.totals(f, f.head);
    $('#catchup').textContent = 'too long offline: conversation list refreshed';
    try {
      await loadList();
    } catch (e) {
      log(`list: ${e.message}`);
    }
    if (S.current) open(S.current);
  }

  // A skipped inbox_seq or a heartbeat ahead of the cursor: pushes may be
  // reordered across reconnects, so wait a moment, then pull what is missing.
  function schedulePull() {
    if (S.pullTimer) return;
    S.pullTimer = setTimeout(async () => {
      S.pullTimer = null;
      if (S.cursor < S.head) await pull();
    }, PULL_DELAY_MS);
  }

  async function pull() {
    if (S.pulling) return;
    S.pulling = true;
    try {
      for (;;) {
        const res = await api('GET', `/v1/sync?after=${S.cursor}&epoch=${S.epoch}&limit=200`);
        if (res.too_long) {
          await onTooLong(res);
          return;
        }
        onEntries(res.entries, res.head);
        counts.totals(res, res.head);
        if (!res.has_more) return;
      }
    } catch (e) {
      log(`pull: ${e.message}`);
    } finally {
      S.pulling = false;
    }
  }

  // ---- the WebSocket ----

  const wsURL = () =>
    `${location.protocol === 'https:' ? 'wss' : 'ws'}://${location.host}/v1/ws?access_token=${encodeURIComponent(S.token)}`;

  function connect() {
    clearTimeout(S.reconnectTimer);
    S.reconnectTimer = null;
    if (!S.wantOnline || S.ws) return;
    if (Date.now() < S.wsRetryAt) {
      poll();
      return;
    }
    setStatus('connecting');
    const ws = new WebSocket(wsURL());
    S.ws = ws;
    let welcomed = false;
    ws.onopen = () => {
      ws.send(JSON.stringify({ type: 'hello', after: S.cursor, epoch: S.epoch }));
    };
    ws.onmessage = (ev) => {
      let f;
      try {
        f = JSON.parse(ev.data);
      } catch (e) {
        return;
      }
      if (f.type === 'welcome') welcomed = true;
      onFrame(f);
    };
    ws.onclose = (ev) => {
      if (S.ws !== ws) return;
      S.ws = null;
      clearTimeout(S.stableTimer);
      onClose(ev.code, ev.reason, welcomed);
    };
  }

  function onFrame(f) {
    switch (f.type) {
      case 'welcome':
        setStatus('online');
        log(`welcome: epoch ${f.epoch}, head ${f.head}, cursor ${S.cursor}`);
        S.head = f.head;
        S.epoch = f.epoch;
        S.caughtUp = 0;
        S.welcomeHead = f.head > S.cursor ? f.head : 0;
        saveCursor();
        counts.totals(f, f.head);
        live.connected();
        // Only a stable connection resets the backoff.
        S.stableTimer = setTimeout(() => {
          S.attempt = 0;
          S.failures = 0;
        }, STABLE_MS);
        flushOutbox();
        flushChanges();
        break;
      case 'entries':
        onEntries(f.entries, f.head);
        break;
      case 'too_long':
        onTooLong(f);
        break;
      case 'heartbeat':
        S.head = Math.max(S.head, f.head);
        $('#head').textContent = S.head;
        if (f.head > S.cursor) schedulePull();
        break;
      case 'send_ack':
        acked(f.msg_id, f.seq);
        break;
      case 'change_ack':
        changeAcked(f.change_id, f.pending);
        break;
      case 'error':
        onError(f);
        break;
      default:
        live.onFrame(f); // typing, presence, receipt; else pong and frames of newer servers
        break;
    }
  }

  function onClose(code, reason, welcomed) {
    if (!S.wantOnline) {
      setStatus('offline');
      return;
    }
    log(`socket closed: ${code} ${reason || ''}`);
    if (code === 4001) {
      logout('unauthorized: log in again');
      return;
    }
    if (code === 4003) {
      S.wantOnline = false;
      setStatus('offline');
      log('not allowed to connect from here');
      return;
    }
    if (!welcomed) S.failures++;
    if (S.failures >= CIRCUIT_FAILURES) {
      // The WebSocket keeps failing (a proxy that does not pass it?):
      // long-poll for a while, then try it again.
      log('WebSocket keeps failing: long-polling for a minute');
      S.failures = 0;
      S.wsRetryAt = Date.now() + POLL_FOR_MS;
      poll();
      return;
    }
    let delay = backoff();
    if (code === 4029 && S.retryAfterMs) delay = S.retryAfterMs + Math.random() * 1000;
    S.retryAfterMs = 0;
    setStatus('connecting');
    S.reconnectTimer = setTimeout(connect, delay);
  }

  // ---- long-polling fallback ----

  async function poll() {
    if (S.pollAbort) return;
    const ctl = new AbortController();
    S.pollAbort = ctl;
    setStatus('polling');
    flushOutbox();
    flushChanges();
    try {
      while (S.wantOnline && Date.now() < S.wsRetryAt) {
        try {
          const res = await api('GET', `/v1/sync?after=${S.cursor}&epoch=${S.epoch}&limit=200&wait=25`, undefined, ctl.signal);
          if (res.too_long) await onTooLong(res);
          else {
            onEntries(res.entries, res.head);
            counts.totals(res, res.head);
          }
          const hint = res._polling ? res._polling.next_interval_ms : 0;
          if (!res.has_more && !res.too_long && res.entries && res.entries.length === 0 && hint) await sleep(Math.random() * hint);
        } catch (e) {
          if (e.name === 'AbortError') return;
          if (e.status && !e.retryable) {
            log(`poll: ${e.message}`);
            return;
          }
          await sleep(e.retryAfter ? e.retryAfter * 1000 : backoff());
        }
      }
    } finally {
      if (S.pollAbort === ctl) S.pollAbort = null;
    }
    if (S.wantOnline) connect();
  }

  // ---- sends ----

  // mentionsOf reads "@all" and "@<user id>" in a body: the mention
  // fields of its send.
  function mentionsOf(body) {
    const ids = [...body.matchAll(/(?:^|\s)@(\d+)\b/g)].map((x) => Number(x[1])).filter((n) => n > 0);
    const out = {};
    if (ids.length) out.mentions = [...new Set(ids)];
    if (/(?:^|\s)@all\b/.test(body)) out.mention_all = true;
    return out;
  }

  // sendFields is the body of a send, over the socket or HTTP.
  const sendFields = (item) => ({
    msg_id: item.msg_id, body: item.body, reply_to: item.reply_to, mentions: item.mentions, mention_all: item.mention_all,
  });

  function send(body) {
    const item = Object.assign({ msg_id: uuid(), conversation_id: S.current, body, status: 'pending' }, mentionsOf(body));
    if (S.replyTo) item.reply_to = S.replyTo;
    S.replyTo = 0;
    S.outbox.push(item);
    saveOutbox();
    renderView();
    transmit(item);
  }

  function transmit(item) {
    if (item.status !== 'pending') return;
    if (S.mode === 'online' && S.ws && S.ws.readyState === WebSocket.OPEN) {
      S.ws.send(JSON.stringify(Object.assign({ type: 'send', conversation_id: item.conversation_id }, sendFields(item))));
    } else if (S.mode === 'polling') {
      httpSend(item);
    } // else offline: it stays in the outbox and goes out on the next welcome
  }

  // wsSend sends a frame when the socket is up (typing needs no retry).
  function wsSend(f) {
    if (S.mode !== 'online' || !S.ws || S.ws.readyState !== WebSocket.OPEN) return false;
    S.ws.send(JSON.stringify(f));
    return true;
  }

  function flushOutbox() {
    for (const o of S.outbox) transmit(o);
  }

  async function httpSend(item) {
    try {
      const res = await api('POST', `/v1/conversations/${item.conversation_id}/messages`, sendFields(item));
      if (res && res.seq) {
        // The answer is the message itself.
        apply({ kind: 'message', message: res });
        renderList();
        renderView();
      }
      else setTimeout(() => transmit(item), 1000 + Math.random() * 1000); // 202 pending
    } catch (e) {
      if (e.retryable || e.status === 0) setTimeout(() => transmit(item), (e.retryAfter || 1) * 1000 + Math.random() * 1000);
      else failed(item.msg_id, e.message);
    }
  }

  // acked marks a send as done: it has its seq. It stays shown from the
  // outbox until its entry arrives (apply removes it), so it does not
  // flicker away between the ack and the push.
  function acked(id, seq) {
    const o = S.outbox.find((x) => x.msg_id === id);
    if (o) {
      o.status = 'sent';
      o.seq = seq;
      saveOutbox();
    }
    renderView();
  }

  function failed(id, why) {
    const o = S.outbox.find((x) => x.msg_id === id);
    if (o) {
      o.status = 'failed';
      o.error = why;
      saveOutbox();
    }
    renderView();
  }

  function onError(f) {
    if (f.change_id) {
      changeFailed(f);
      return;
    }
    if (f.code === 'rate_limited' && !f.msg_id) S.retryAfterMs = f.retry_after_ms || 0;
    if (!f.msg_id) {
      log(`error: ${f.code}: ${f.message}`);
      return;
    }
    const o = S.outbox.find((x) => x.msg_id === f.msg_id);
    if (!o) return;
    if (f.retryable) setTimeout(() => transmit(o), (f.retry_after_ms || 1000) + Math.random() * 1000);
    else failed(f.msg_id, f.message);
  }

  // ---- changes of a message ----

  // change asks for an edit ({body}), a delete or a reaction ({emoji}; ''
  // takes one's reaction back) of message seq. Its result arrives as an
  // update entry; the change only waits here for its ack.
  function change(type, cid, seq, fields) {
    const c = Object.assign({ type, change_id: uuid(), conversation_id: cid, seq }, fields);
    S.changes.set(c.change_id, c);
    $('#notice').textContent = '';
    renderView();
    transmitChange(c);
  }

  function transmitChange(c) {
    if (!S.changes.has(c.change_id)) return;
    if (S.mode === 'online' && S.ws && S.ws.readyState === WebSocket.OPEN) {
      S.ws.send(JSON.stringify(c));
    } else if (S.mode === 'polling') {
      httpChange(c);
    } // else offline: it waits for the next welcome
  }

  function flushChanges() {
    for (const c of S.changes.values()) transmitChange(c);
  }

  const retryChange = (c, ms) => setTimeout(() => transmitChange(c), ms + Math.random() * 1000);

  // httpChange makes a change through its route (docs/protocol.md,
  // "Changing a message").
  async function httpChange(c) {
    const path = `/v1/conversations/${c.conversation_id}/messages/${c.seq}`;
    let req;
    if (c.type === 'edit') req = ['PATCH', path, { change_id: c.change_id, body: c.body }];
    else if (c.type === 'delete') req = ['DELETE', path, { change_id: c.change_id }];
    else if (c.emoji) req = ['PUT', `${path}/reaction`, { change_id: c.change_id, emoji: c.emoji }];
    else req = ['DELETE', `${path}/reaction`, { change_id: c.change_id }];
    try {
      const res = await api(...req);
      if (res && res.seq) {
        // The answer is the message after the change.
        apply({ kind: 'update', message: res });
        changeAcked(c.change_id, false);
        renderList();
      } else {
        retryChange(c, 1000); // 202 pending: again with the same change_id
      }
    } catch (e) {
      if (e.retryable) retryChange(c, (e.retryAfter || 1) * 1000);
      else changeFailed({ change_id: c.change_id, code: e.code, message: e.message });
    }
  }

  // changeAcked: a pending ack means appended but not yet projected: the
  // update entry will come, but only a retry with the same change_id tells
  // a refusal the log's order decides, so it goes again.
  function changeAcked(id, pending) {
    const c = S.changes.get(id);
    if (!c) return;
    if (pending) {
      retryChange(c, 1000);
      return;
    }
    S.changes.delete(id);
    renderView();
  }

  function changeFailed(f) {
    const c = S.changes.get(f.change_id);
    if (!c) return;
    if (f.retryable) {
      retryChange(c, f.retry_after_ms || 1000);
      return;
    }
    S.changes.delete(f.change_id);
    const what = c.type === 'react' ? (c.emoji ? `reaction ${c.emoji}` : 'reaction removal') : c.type;
    $('#notice').textContent = `${what} of #${c.seq} refused: ${f.message || f.code}`;
    log(`${c.type} of ${c.conversation_id}/${c.seq}: ${f.code}: ${f.message}`);
    renderView();
  }

  // ---- online / offline, login / logout ----

  function goOnline() {
    S.wantOnline = true;
    S.attempt = 0;
    S.failures = 0;
    S.wsRetryAt = 0;
    setStatus('connecting');
    connect();
  }

  function goOffline() {
    S.wantOnline = false;
    clearTimeout(S.reconnectTimer);
    clearTimeout(S.stableTimer);
    clearTimeout(S.pullTimer);
    S.pullTimer = null;
    if (S.pollAbort) S.pollAbort.abort();
    if (S.ws) {
      const ws = S.ws;
      S.ws = null;
      ws.close(1000, 'offline');
    }
    setStatus('offline');
    log(`offline at cursor ${S.cursor}`);
  }

  async function start() {
    $('#login').hidden = true;
    $('#app').hidden = false;
    $('#net-toggle').hidden = false;
    $('#logout-btn').hidden = false;
    $('#who').textContent = `user ${S.user}`;
    S.epoch = load('epoch', null);
    S.cursor = load('cursor', null);
    S.convSeq = load('convseq', {});
    S.outbox = load('outbox', []);
    saveOutbox();
    try {
      await loadList();
    } catch (e) {
      log(`list: ${e.message}`);
      if (S.cursor === null) S.cursor = 0;
    }
    saveCursor();
    // A random startup delay spreads reconnects after a mass restart.
    S.reconnectTimer = setTimeout(goOnline, Math.random() * 300);
  }

  function logout(why) {
    goOffline();
    sessionStorage.removeItem('inboxd.user');
    if (S.user) localStorage.removeItem(key('token'));
    S.user = 0;
    S.token = '';
    S.convs.clear();
    S.msgs.clear();
    S.loaded.clear();
    S.changes.clear();
    S.readSent = {};
    live.reset();
    counts.reset();
    S.editing = null;
    S.replyTo = 0;
    S.current = 0;
    $('#app').hidden = true;
    $('#login').hidden = false;
    $('#net-toggle').hidden = true;
    $('#logout-btn').hidden = true;
    $('#who').textContent = '';
    $('#login-error').textContent = why || '';
  }

  $('#login-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const id = Number($('#user-id').value);
    if (!(id > 0)) return;
    try {
      const res = await fetch('/v1/dev/token', {
        method: 'POST',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ user_id: id }),
      });
      const data = await res.json();
      if (!res.ok) throw new Error(data?.error?.message || `HTTP ${res.status}`);
      S.user = id;
      S.token = data.token;
      sessionStorage.setItem('inboxd.user', String(id));
      save('token', data.token);
      start();
    } catch (e) {
      $('#login-error').textContent = `login failed: ${e.message} (is dev mode on?)`;
    }
  });

  $('#logout-btn').addEventListener('click', () => logout(''));
  $('#reply-cancel').addEventListener('click', () => {
    S.replyTo = 0;
    renderReplyBar();
  });
  $('#net-toggle').addEventListener('click', () => (S.wantOnline ? goOffline() : goOnline()));

  $('#create-form').addEventListener('submit', async (ev) => {
    ev.preventDefault();
    const members = $('#new-members').value.split(/[\s,]+/).filter(Boolean).map(Number).filter((n) => n > 0);
    try {
      const res = await api('POST', '/v1/conversations', { title: $('#new-title').value, members });
      $('#new-title').value = '';
      $('#new-members').value = '';
      log(`created conversation ${res.conversation_id}`);
      await loadList();
      open(res.conversation_id);
    } catch (e) {
      log(`create: ${e.message}`);
    }
  });

  $('#compose-form').addEventListener('submit', (ev) => {
    ev.preventDefault();
    const body = $('#compose').value;
    if (!body || !S.current) return;
    $('#compose').value = '';
    live.stopTyping();
    send(body);
  });
  $('#compose').addEventListener('input', () => live.typed());
  $('#compose').addEventListener('blur', () => live.stopTyping());

  // Resume the tab's session (a reload keeps the user, cursor and outbox).
  const saved = Number(sessionStorage.getItem('inboxd.user'));
  if (saved > 0) {
    S.user = saved;
    S.token = load('token', '');
    if (S.token) start();
    else S.user = 0;
  }
})();
