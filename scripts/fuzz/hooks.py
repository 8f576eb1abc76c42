"""Schemathesis hooks of the API fuzz run (scripts/fuzz-api.sh).

positive_data_acceptance fails a request that matches /openapi.yaml and is
refused (400, 413). The document states every rule of the server's that
OpenAPI can state; the rules below are the ones it cannot, each written in
the document's descriptions. filter_failure drops that check's failure only
when the request that was sent breaks one of them and the server's answer
names that rule, so that any other refusal of a schema-valid request still
fails the run. The run's summary counts the dropped failures.

before_call makes the fuzzer let go of the connections that GET /v1/ws
upgrades.
"""

import atexit
import collections
import json
import os
import re
import threading
import urllib.parse

import schemathesis

SEND = "POST /v1/conversations/{cid}/messages"
EDIT = "PATCH /v1/conversations/{cid}/messages/{seq}"
DELETE = "DELETE /v1/conversations/{cid}/messages/{seq}"
REACT = "PUT /v1/conversations/{cid}/messages/{seq}/reaction"
UNREACT = "DELETE /v1/conversations/{cid}/messages/{seq}/reaction"
REPORT = "POST /v1/conversations/{cid}/messages/{seq}/report"
CREATE = "POST /v1/conversations"
LIST = "GET /v1/conversations"
SYNC = "GET /v1/sync"
UPLOAD = "POST /v1/conversations/{cid}/uploads"
COMPLETE = "POST /v1/conversations/{cid}/uploads/{id}/complete"
ROLE = "PUT /v1/conversations/{cid}/members/{uid}/role"
BAN = "PUT /v1/conversations/{cid}/bans/{uid}"
UNBAN = "DELETE /v1/conversations/{cid}/bans/{uid}"
MUTE = "PUT /v1/conversations/{cid}/mutes/{uid}"
UNMUTE = "DELETE /v1/conversations/{cid}/mutes/{uid}"
BLOCK = "PUT /v1/blocks/{uid}"
UNBLOCK = "DELETE /v1/blocks/{uid}"
UPDATE = "PATCH /v1/conversations/{cid}"
SEARCH = "GET /v1/search"

# The largest attachment of the fuzzed server (dev's default,
# --attachment-max-size): a deployment's setting, not the document's.
MAX_ATTACHMENT = 100 << 20

# The body's request size limit (gateway Config.MaxRequestBytes, default).
MAX_REQUEST_BYTES = 64 << 10

# Idempotency keys: the body's field or the Idempotency-Key header, equal
# when both are given. OpenAPI has no rule that spans a header and a body
# field, so both are optional in the document.
ID_FIELD = {SEND: "msg_id", EDIT: "change_id", DELETE: "change_id", REACT: "change_id", UNREACT: "change_id",
            REPORT: "report_id", ROLE: "change_id",
            BAN: "change_id", MUTE: "change_id", UPDATE: "change_id"}

# UTF-8 byte limits of text fields. JSON Schema's maxLength counts
# characters, the server bytes: 64 characters may be 256 bytes.
BYTE_LIMITS = {
    (CREATE, "title"): 256,
    (UPDATE, "title"): 256,
    (SEND, "body"): 4096,
    (EDIT, "body"): 4096,
    (REACT, "emoji"): 64,
    (REPORT, "note"): 1000,
    (UPLOAD, "name"): 255,
}

# Refusals that depend on what the server holds, not on the request's form:
# no schema can know which seqs a user can see, who is a member, which keys
# were used before, or where the inbox head is. Each is documented (the
# operation's description, docs/protocol.md); all are 400s.
CHANGE_STATE = [
    ("a system message", r"^message \d+ is a system message; it cannot change"),
    ("a deleted message", r"^message \d+ of conversation \d+ is deleted"),
    ("after the edit window", r"^message \d+ can no longer be edited "),
    ("too many distinct reactions", r"^message \d+ has \d+ distinct reactions already"),
    ("change_id used by another change", r"^change_id \S+ is already used by another change"),
    ("refused by the projection", r"^the change \S+ was refused by the projection "),
]
STATE_REFUSALS = {
    SYNC: [("after beyond the inbox head", r"^after \d+ is beyond the inbox head ")],
    SEND: [
        ("reply_to of no visible message", r"^reply_to \d+ names no message you can see "),
        ("mentions of non-members", r"^mentions name \d+ users who are not members "),
        ("mention_all in a conversation too large", r"^mention_all is for conversations of at most "),
        ("msg_id used by another message", r"^msg_id \S+ is already used by another message"),
        ("dead-lettered msg_id", r"^message \S+ was refused by the projection \(dead-lettered\)"),
        ("an upload not the sender's here", r"^upload \S+ is not one of yours in conversation \d+$"),
        ("an upload attached or expired", r"^upload \S+ is attached to another message or has expired$"),
        ("an upload not uploaded", r"^upload \S+ has not been uploaded yet \(or, in parts, not completed\)$"),
        ("an upload of the wrong size", r"^upload \S+ holds \d+ bytes"),
        ("an upload claimed meanwhile", r"^an upload of msg_id \S+ was attached to another message meanwhile$"),
        ("an upload twice (ids differing in case)", r"^upload \S+ is attached twice$"),
    ],
    COMPLETE: [
        ("an upload lacking parts", r"^upload \S+ lacks \d+ parts; PUT them first$"),
        ("an upload whose file is not in", r"^upload \S+ has not been uploaded yet: PUT the sealed file on its URL$"),
    ],
    **{op: CHANGE_STATE for op in (EDIT, DELETE, REACT, UNREACT)},
    # Who may set which role, and on whom, is the members' roles (403s);
    # a refusal the projection made meanwhile for another reason is a 400.
    ROLE: [("refused by the projection", r"^the role change was refused by the projection ")],
    # Who may ban and mute whom is the members' roles (403s); an until in
    # the past depends on the clock; a refusal the projection made
    # meanwhile for another reason is a 400.
    **{op: [("an until that has passed", r"^until must be in the future$"),
            ("refused by the projection", r"^the member\.\w+ was refused by the projection ")]
       for op in (BAN, UNBAN, MUTE, UNMUTE)},
    # The caller's own id is a valid uid that nobody may block.
    **{op: [("oneself", r"^a user does not block itself$")] for op in (BLOCK, UNBLOCK)},
    # Who may change which setting is the members' roles (403s); a refusal
    # the projection made meanwhile for another reason is a 400.
    UPDATE: [("refused by the projection", r"^the change of conversation \d+ was refused by the projection ")],
    REPORT: [
        ("a system message", r"^message \d+ is a system message; it cannot be reported"),
        ("one's own message", r"^message \d+ of conversation \d+ is your own: it cannot be reported"),
        ("report_id used by another report", r"^report_id \S+ is already used by another report"),
        ("refused by the projection", r"^the report \S+ was refused by the projection "),
    ],
}

# next_page values are opaque: the document says what they look like (the
# pattern of its next_page branch of page, repeated here), not which ones
# the server made. A made-up one, or one of the list in activity order given
# with since_version, is refused. A page number is all the document says.
NEXT_PAGE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{3,}$")
TOKEN_REFUSALS = [r"^page is not a next_page value of this API nor a page number$",
                  r"^page belongs to a list without since_version$"]


# GET /v1/search's rules the document states only in words: q's limit is
# in bytes (maxLength counts characters) and in terms; the seq filters need
# conversation_id; a cursor must be one a gateway issued for the same order
# (the pattern, repeated here, says only what one looks like).
SEARCH_MAX_Q_BYTES = 256
SEARCH_CURSOR = re.compile(r"^[bc][g-v][A-Za-z0-9_-]{37}$")


def _search_refusal(request, message):
    """The search rule the sent query breaks and the answer names, or None."""
    query = urllib.parse.parse_qs(urllib.parse.urlsplit(request.url or "").query, keep_blank_values=True)
    q = query.get("q", [])
    if len(q) == 1 and len(q[0].encode()) > SEARCH_MAX_Q_BYTES and re.match(r"^q is \d+ bytes, at most ", message):
        return "q over 256 bytes"
    if len(q) == 1 and re.match(r"^q has \d+ terms, at most \d+ are searched$", message):
        return "q of more than 16 terms"
    for name in ("after_seq", "before_seq"):
        if name in query and "conversation_id" not in query and message == f"{name} needs conversation_id":
            return f"{name} without conversation_id"
    cursor = query.get("cursor", [])
    if len(cursor) == 1 and SEARCH_CURSOR.match(cursor[0]) and message == "cursor is not one this search issued":
        return "a cursor the server did not issue"
    # RFC 3339's leap second: the document's date-time admits it, the
    # server's clock has no place for it.
    for name in ("after", "before"):
        v = query.get(name, [])
        if len(v) == 1 and ":60" in v[0] and message == f"parameter {name} must be an RFC 3339 time":
            return "a leap second"
    return None


def _sent_json(request):
    """The JSON object of the request that was sent, {} when none."""
    body = request.body
    if not body:
        return {}
    if isinstance(body, str):
        body = body.encode()
    try:
        value = json.loads(body)
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def _error_message(response):
    try:
        return response.json()["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return ""


def _unexpressible(op, request, status, message):
    """The rule the document cannot state that the sent request breaks and the answer names, or None."""
    body = _sent_json(request)
    field = ID_FIELD.get(op)
    if field is not None and status == 400:
        in_body = body.get(field)
        in_header = request.headers.get("Idempotency-Key")
        if not in_body and not in_header and message == f"{field} (or the Idempotency-Key header) is required":
            return "id in neither the body nor the header"
        if in_body and in_header and in_body.lower() != in_header.lower() and message == f"{field} and Idempotency-Key differ":
            return "id in the body and the header differ"
    for (limit_op, name), limit in BYTE_LIMITS.items():
        value = body.get(name)
        if (limit_op == op and isinstance(value, str) and len(value.encode()) > limit
                and status in (400, 413) and message.startswith(name + " ")):
            return f"{name} over {limit} bytes"
    if (op == SEND and status == 400 and body.get("body") == "" and not body.get("attachments")
            and message == "body must not be empty"):
        return "an empty body without attachments"
    size = body.get("size")
    if (op == UPLOAD and status == 413 and isinstance(size, int) and size > MAX_ATTACHMENT
            and message.startswith("a file of ")):
        return "a file over the server's --attachment-max-size"
    if (status == 413 and request.body is not None and len(request.body) > MAX_REQUEST_BYTES
            and message.startswith("request body over ")):
        return "request body over its size limit"
    if status == 400:
        for name, pattern in STATE_REFUSALS.get(op, ()):
            if re.search(pattern, message):
                return "state: " + name
    if op == SEARCH and status == 400:
        rule = _search_refusal(request, message)
        if rule is not None:
            return rule
    if op == LIST and status == 400 and any(re.search(p, message) for p in TOKEN_REFUSALS):
        page = urllib.parse.parse_qs(urllib.parse.urlsplit(request.url or "").query).get("page", [])
        if len(page) == 1 and NEXT_PAGE.match(page[0]):
            return "a next_page value the server did not make"
    return None


# The dropped failures by operation and rule, written at exit to the file
# INBOXD_FUZZ_DROPPED names (fuzz-api.sh prints it): an exclusion that
# suddenly drops much more, or a rule that drops nothing, shows.
_dropped = collections.Counter()
_dropped_mu = threading.Lock()


def _write_dropped():
    path = os.environ.get("INBOXD_FUZZ_DROPPED")
    if path:
        with open(path, "w") as f:
            for (op, rule), n in sorted(_dropped.items()):
                f.write(f"{op}\t{rule}\t{n}\n")


atexit.register(_write_dropped)


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if "positive_data_acceptance" not in getattr(failure, "checks", ()):
        return True
    op = f"{case.method.upper()} {case.path}"
    rule = _unexpressible(op, response.request, response.status_code, _error_message(response))
    if rule is None:
        return True
    with _dropped_mu:
        _dropped[op, rule] += 1
    return False


def _let_go_of_upgraded(response, *args, **kwargs):
    # A 101 hands the connection to the WebSocket; requests would put it back
    # in its pool and send the next request into the WebSocket session.
    # Closed, the pool opens a fresh one, and the server ends the session.
    conn = getattr(response.raw, "connection", None)
    if response.status_code == 101 and conn is not None:
        conn.close()


@schemathesis.hook
def before_call(context, case, kwargs):
    if case.path == "/v1/ws":
        kwargs["hooks"] = {"response": [_let_go_of_upgraded]}
