package notifier

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// The dev receiver: a webhook target that keeps what it gets, so that
// notifications can be watched with no phone (`inboxd dev` mounts it;
// `inboxd tail --notifications` reads it). It checks a delivery the way
// docs/notifications.md tells a receiver to.

// Defaults of a DevReceiver.
const (
	DefaultDevKeep      = 1000
	DefaultDevTolerance = 5 * time.Minute
	// MaxDevBody bounds the body of a delivery the receiver reads.
	MaxDevBody = 64 << 10
)

// Entry is one notification a DevReceiver got: N numbers them from 1 in
// the order they came (a retried id keeps its first number). A report
// (type TypeReport) is in Report, its Notification holding only its type
// and id.
type Entry struct {
	N            int64          `json:"n"`
	ReceivedAt   time.Time      `json:"received_at"`
	Notification Webhook        `json:"notification"`
	Report       *ReportWebhook `json:"report,omitempty"`
}

// DevList is the JSON answer of DevReceiver.ListHandler: the entries after
// the asked number, and Next, the number to ask after next time.
type DevList struct {
	Notifications []Entry `json:"notifications"`
	Next          int64   `json:"next"`
}

// DevReceiver receives webhook deliveries (ServeHTTP, POST) signed with
// Secret and keeps the last Keep of them in memory. The zero value is not
// ready: use NewDevReceiver.
type DevReceiver struct {
	secret    []byte
	keep      int
	tolerance time.Duration
	now       func() time.Time

	mu      sync.Mutex
	entries []Entry          // oldest first, at most keep
	seen    map[string]int64 // id -> N, of the kept entries
	last    int64
}

// NewDevReceiver returns a receiver checking signatures with secret that
// keeps the last keep notifications (<= 0: DefaultDevKeep).
func NewDevReceiver(secret []byte, keep int) *DevReceiver {
	if keep <= 0 {
		keep = DefaultDevKeep
	}
	return &DevReceiver{secret: bytes.Clone(secret), keep: keep, tolerance: DefaultDevTolerance,
		now: time.Now, seen: map[string]int64{}}
}

// ServeHTTP takes one delivery: 405 unless POST, 401 when the signature
// does not verify (or its timestamp is more than DefaultDevTolerance
// away), 400 when the body is not a notification, else 200 (also for an
// id it already has, which it does not store again).
func (d *DevReceiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "POST a notification", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxDevBody))
	if err != nil {
		http.Error(w, "body: "+err.Error(), http.StatusRequestEntityTooLarge)
		return
	}
	if err := d.verify(r.Header.Get(HeaderSignature), body); err != nil {
		http.Error(w, "signature: "+err.Error(), http.StatusUnauthorized)
		return
	}
	var n Webhook
	var rep *ReportWebhook
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&n); err != nil || dec.More() {
		http.Error(w, "body is not one notification object", http.StatusBadRequest)
		return
	}
	if n.Type == TypeReport {
		rep = &ReportWebhook{}
		if err := json.Unmarshal(body, rep); err != nil || rep.ID == "" || rep.ConversationID <= 0 {
			http.Error(w, "report without id or conversation_id", http.StatusBadRequest)
			return
		}
		n = Webhook{Type: TypeReport, ID: rep.ID}
	} else if n.ID == "" || n.UserID <= 0 || n.ConversationID <= 0 {
		http.Error(w, "notification without id, user_id or conversation_id", http.StatusBadRequest)
		return
	}
	if key := r.Header.Get(HeaderIdempotency); key != "" && key != n.ID {
		http.Error(w, HeaderIdempotency+" is not the body's id", http.StatusBadRequest)
		return
	}
	d.add(n, rep)
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write([]byte(`{"ok":true}` + "\n"))
}

// Errors of a signature check.
var (
	errSigMalformed = errors.New("malformed, want t=<unix>,v1=<hex>")
	errSigOld       = errors.New("timestamp outside the tolerance")
	errSigMismatch  = errors.New("no v1 value matches")
)

// verify checks header (X-Inboxd-Signature) against body as
// docs/notifications.md describes: every v1 value is tried, in constant
// time.
func (d *DevReceiver) verify(header string, body []byte) error {
	var ts string
	var sigs [][]byte
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return errSigMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			if s, err := hex.DecodeString(v); err == nil {
				sigs = append(sigs, s)
			}
		}
	}
	t, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sigs) == 0 {
		return errSigMalformed
	}
	if age := d.now().Sub(time.Unix(t, 0)); age > d.tolerance || age < -d.tolerance {
		return errSigOld
	}
	mac := hmac.New(sha256.New, d.secret)
	mac.Write([]byte(ts + "."))
	mac.Write(body)
	want := mac.Sum(nil)
	for _, s := range sigs {
		if hmac.Equal(s, want) {
			return nil
		}
	}
	return errSigMismatch
}

// add keeps n (with rep, a report's body) unless its id is kept already,
// dropping the oldest beyond keep.
func (d *DevReceiver) add(n Webhook, rep *ReportWebhook) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if _, dup := d.seen[n.ID]; dup {
		return
	}
	d.last++
	d.entries = append(d.entries, Entry{N: d.last, ReceivedAt: d.now().UTC(), Notification: n, Report: rep})
	d.seen[n.ID] = d.last
	if over := len(d.entries) - d.keep; over > 0 {
		for _, e := range d.entries[:over] {
			delete(d.seen, e.Notification.ID)
		}
		d.entries = append(d.entries[:0:0], d.entries[over:]...)
	}
}

// List returns the kept entries numbered after after, oldest first, of
// user (0: of everyone).
func (d *DevReceiver) List(after int64, user int64) []Entry {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := []Entry{}
	for _, e := range d.entries {
		if e.N > after && (user == 0 || e.Notification.UserID == user) {
			out = append(out, e)
		}
	}
	return out
}

// Last is the number of the newest entry (0 before the first).
func (d *DevReceiver) Last() int64 {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last
}

// ListHandler serves GET ?after=N&user_id=U (both optional, non-negative):
// a DevList of the entries after N (of user U), with Next the newest
// number the receiver has given, so that asking after Next gets only new
// ones. An N beyond the newest number (the receiver restarted, numbering
// from 1 again) lists everything kept.
func (d *DevReceiver) ListHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		q := r.URL.Query()
		var args [2]int64
		for i, name := range []string{"after", "user_id"} {
			v := q.Get(name)
			if v == "" {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				http.Error(w, name+" must be a non-negative integer", http.StatusBadRequest)
				return
			}
			args[i] = n
		}
		// Next first: an entry added between the two calls is listed now
		// and counted in Next from the list itself.
		next := d.Last()
		if args[0] > next {
			args[0] = 0 // numbers from a receiver before a restart: all it has is new
		}
		list := DevList{Notifications: d.List(args[0], args[1]), Next: next}
		if k := len(list.Notifications); k > 0 {
			list.Next = max(list.Next, list.Notifications[k-1].N)
		}
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(list)
	})
}
