// Unread and mention counts of the demo (docs/protocol.md, "Unread and
// mention counts"). Each record keeps the server's unread_count and
// mention_count; the header shows unread_total and mention_total. The
// totals are the server's from the welcome and every sync answer, at that
// answer's head; entries past that head move them as the protocol says: +1
// for a text message of another sender (in a conversation that is not open:
// the open one is read at once), and a record entry, one's own send or
// one's own read replaces a conversation's counts, the totals following the
// difference. Entries at or below the head are in the server's totals
// already, and messages at or below the conversation list's head in its
// records' counts.
'use strict';

window.inboxdCounts = ({ S, $ }) => {
  const C = {
    unread: 0, // the header's totals
    mention: 0,
    head: 0, // the inbox_seq the totals were counted at
    listHead: 0, // the inbox_head of the last conversation list
  };

  // counted: an entry past the totals' head (or a live answer without an
  // inbox_seq) moves the totals.
  const counted = (e) => !e.inbox_seq || e.inbox_seq > C.head;

  const mentionsMe = (m) => m.mention_all || (m.mentions || []).includes(S.user);

  // weigh is what a record adds to the totals: its unread count unless
  // muted, its mention count always.
  const weigh = (r) => (!r || r.removed ? [0, 0] : [r.muted ? 0 : r.unread_count || 0, r.mention_count || 0]);

  // replace puts counts into record c (or a new record), moving the totals
  // by the difference when the entry is counted.
  function replace(c, fresh, e) {
    const [u0, m0] = weigh(c);
    Object.assign(c, fresh);
    if (!counted(e)) return;
    const [u1, m1] = weigh(c);
    C.unread = Math.max(0, C.unread + u1 - u0);
    C.mention = Math.max(0, C.mention + m1 - m0);
  }

  // message applies a message entry e to its conversation's record c.
  function message(c, e) {
    const m = e.message;
    if (m.sender_id === S.user) {
      // A send moves one's read position past it: nothing is unread.
      replace(c, { read_seq: Math.max(c.read_seq || 0, m.seq), unread_count: 0, mention_count: 0 }, e);
      return;
    }
    if (m.kind !== 'text' || m.deleted || m.seq <= (c.read_seq || 0)) return;
    if (m.conversation_id === S.current) return; // read when shown (read())
    if (e.inbox_seq && e.inbox_seq <= C.listHead) return; // the list counted it
    replace(c, {
      unread_count: (c.unread_count || 0) + 1,
      mention_count: (c.mention_count || 0) + (mentionsMe(m) ? 1 : 0),
    }, e);
  }

  // record applies a record entry: old is the record held (or undefined),
  // r the new one; it returns the record to keep.
  function record(old, r, e) {
    const c = Object.assign({}, old);
    replace(c, r, e);
    return c;
  }

  // read: the user read c to its end on this device: nothing is unread.
  // Its read_seq moves with the record entry the read makes.
  function read(c) {
    replace(c, { unread_count: 0, mention_count: 0 }, {});
  }

  // totals takes an answer's unread_total and mention_total, counted at head.
  function totals(f, head) {
    if (typeof f.unread_total !== 'number') return;
    C.unread = f.unread_total;
    C.mention = f.mention_total || 0;
    C.head = head;
    render();
  }

  // listed: a conversation list read at inboxHead replaced the records.
  // Until the first welcome or sync answer, the totals are the records'.
  function listed(inboxHead, records) {
    C.listHead = inboxHead;
    if (C.head) return;
    C.unread = 0;
    C.mention = 0;
    for (const r of records) {
      const [u, m] = weigh(r);
      C.unread += u;
      C.mention += m;
    }
    render();
  }

  function render() {
    $('#unread-total').textContent = C.unread;
    $('#unread-total').classList.toggle('zero', C.unread === 0);
    $('#mention-total').textContent = C.mention ? `@${C.mention}` : '';
  }

  // badge is the list's marker of record c: its unread count and an @
  // when it mentions the user.
  function badge(c) {
    if (!c.unread_count && !c.mention_count) return null;
    const span = document.createElement('span');
    span.className = 'unread';
    span.textContent = c.unread_count || 0;
    if (c.mention_count) {
      const at = document.createElement('span');
      at.className = 'mention';
      at.title = `${c.mention_count} mentioning you`;
      at.textContent = '@';
      span.prepend(at);
    }
    return span;
  }

  function reset() {
    Object.assign(C, { unread: 0, mention: 0, head: 0, listHead: 0 });
    render();
  }

  return { message, record, read, totals, listed, render, badge, reset, mentionsMe };
};
