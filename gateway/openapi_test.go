package gateway

import (
	"encoding/json"
	"net/http"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/inboxd/inboxd/attachments"
	"github.com/inboxd/inboxd/gateway/inbox"
	"github.com/inboxd/inboxd/protocol"
)

// TestOpenAPIMatchesRoutes keeps openapi.yaml true: every registered route
// is documented and every documented operation is registered, and the
// served document is the embedded one.
func TestOpenAPIMatchesRoutes(t *testing.T) {
	var doc struct {
		OpenAPI string                          `yaml:"openapi"`
		Paths   map[string]map[string]yaml.Node `yaml:"paths"`
	}
	require.NoError(t, yaml.Unmarshal(openapiYAML, &doc))
	require.True(t, strings.HasPrefix(doc.OpenAPI, "3."))
	var documented []string
	for path, ops := range doc.Paths {
		for method := range ops {
			if method == "parameters" {
				continue
			}
			documented = append(documented, strings.ToUpper(method)+" "+path)
		}
	}
	// Dev mode with attachments in a directory: every route.
	local, err := attachments.NewLocal(t.TempDir(), "http://localhost", []byte("local-store-secret-0123456789"))
	require.NoError(t, err)
	tg := newGateway(t, func(c *Config) { c.Attachments.Store = local })
	registered := tg.g.routePaths()
	sort.Strings(documented)
	sort.Strings(registered)
	require.Equal(t, registered, documented)

	r := (&user{tg: tg}).do(t, "GET", "/openapi.yaml", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, string(openapiYAML), string(r.body))
}

// openapiDoc is the document as plain maps, with $ref resolution.
type openapiDoc map[string]any

func loadOpenAPI(t testing.TB) openapiDoc {
	t.Helper()
	var doc map[string]any
	require.NoError(t, yaml.Unmarshal(openapiYAML, &doc))
	return doc
}

// resolve follows a local "$ref" (and refs of refs); anything else is
// returned as it is.
func (d openapiDoc) resolve(t testing.TB, v any) map[string]any {
	t.Helper()
	m, _ := v.(map[string]any)
	for i := 0; m != nil && i < 10; i++ {
		ref, ok := m["$ref"].(string)
		if !ok {
			return m
		}
		require.True(t, strings.HasPrefix(ref, "#/"), "only local refs: %s", ref)
		var cur any = map[string]any(d)
		for _, part := range strings.Split(strings.TrimPrefix(ref, "#/"), "/") {
			part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
			cm, ok := cur.(map[string]any)
			require.True(t, ok, "ref %s does not resolve", ref)
			cur, ok = cm[part]
			require.True(t, ok, "ref %s does not resolve", ref)
		}
		m, _ = cur.(map[string]any)
		require.NotNil(t, m, "ref %s is not an object", ref)
	}
	return m
}

// TestOpenAPIDocument checks what the route test cannot: every $ref
// resolves, every object schema's required fields are among its
// properties, each operation lists the error answers the server can give
// it (with the Error shape), and authenticated successes list the
// rate-limit headers.
func TestOpenAPIDocument(t *testing.T) {
	doc := loadOpenAPI(t)

	var walk func(path string, v any)
	walk = func(path string, v any) {
		switch x := v.(type) {
		case map[string]any:
			if _, ok := x["$ref"]; ok {
				doc.resolve(t, x)
			}
			if props, ok := x["properties"].(map[string]any); ok {
				req, _ := x["required"].([]any)
				for _, r := range req {
					_, ok := props[r.(string)]
					require.True(t, ok, "%s: required %q is not a property", path, r)
				}
			}
			for k, e := range x {
				walk(path+"/"+k, e)
			}
		case []any:
			for i, e := range x {
				walk(path+"/"+strconv.Itoa(i), e)
			}
		}
	}
	walk("#", map[string]any(doc))

	routes := (&Gateway{cfg: Config{DevMode: true}}).routeTable()
	paths := doc["paths"].(map[string]any)
	for _, rt := range routes {
		op, ok := paths[rt.path].(map[string]any)[strings.ToLower(rt.method)].(map[string]any)
		require.True(t, ok, "%s is documented", rt.pattern())
		responses := op["responses"].(map[string]any)
		_, hasBody := op["requestBody"]
		hasCid := strings.Contains(rt.path, "{cid}")

		want := []string{"431"}
		// The server API authenticates in its handlers, with its own
		// scheme (server_api.go): it lists what an authenticated route
		// does, and 403 (Origin, scope).
		server := strings.HasPrefix(rt.path, ServerPrefix)
		if rt.auth || server {
			want = append(want, "400", "401", "429", "500", "503")
		}
		if hasBody {
			want = append(want, "400", "413")
		}
		if hasCid {
			want = append(want, "403", "404")
		}
		for _, code := range want {
			_, ok := responses[code]
			require.True(t, ok, "%s lists %s", rt.pattern(), code)
		}

		// The WebSocket checks its token after the upgrade: optional
		// security ({} or bearer), never a 401.
		sec, hasSec := op["security"].([]any)
		anonymous := hasSec && len(sec) == 0
		for _, s := range sec {
			anonymous = anonymous || len(s.(map[string]any)) == 0
		}
		require.Equal(t, !rt.auth && !server, anonymous, "%s: anonymous exactly on the routes without a token", rt.pattern())
		if server {
			require.Equal(t, []any{map[string]any{"serverKey": []any{}}}, sec, "%s: the server API takes API keys only", rt.pattern())
			require.Contains(t, responses, "403", "%s", rt.pattern())
			require.Equal(t, []any{"server"}, op["tags"], "%s: tagged server", rt.pattern())
		}

		for code, v := range responses {
			resp := doc.resolve(t, v)
			headers, _ := resp["headers"].(map[string]any)
			switch {
			case code >= "400":
				schema := doc.resolve(t, resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"])
				if all, ok := schema["allOf"].([]any); ok {
					schema = doc.resolve(t, all[0])
				}
				require.Contains(t, schema["required"], "error", "%s %s has the Error shape", rt.pattern(), code)
			case code >= "200" && code < "300" && (rt.auth || server):
				for _, h := range []string{"X-RateLimit-Limit", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
					require.Contains(t, headers, h, "%s %s lists the rate-limit headers", rt.pattern(), code)
				}
			}
			switch code {
			case "429", "503":
				require.Contains(t, headers, "Retry-After", "%s %s", rt.pattern(), code)
			case "401":
				require.Contains(t, headers, "WWW-Authenticate", "%s %s", rt.pattern(), code)
			}
		}
	}

	codes := doc.resolve(t, map[string]any{"$ref": "#/components/schemas/Error"})["properties"].(map[string]any)["error"].(map[string]any)["properties"].(map[string]any)["code"].(map[string]any)["enum"]
	require.ElementsMatch(t, []any{protocol.CodeBadRequest, protocol.CodeUnauthorized, protocol.CodeNotMember, protocol.CodeForbidden, protocol.CodeNotFound,
		protocol.CodePayloadTooLarge, protocol.CodeHeaderTooLarge, protocol.CodeRateLimited, protocol.CodeUnavailable, protocol.CodeInternal}, codes)
}

// TestOpenAPIObjectsMatchWire keeps the document's object schemas equal to
// what the server writes: every field the Go type marshals is a required
// property of its schema, and the schema has no property the server never
// writes. (Every answer field is always present; absent-or-null is only
// for request fields.)
func TestOpenAPIObjectsMatchWire(t *testing.T) {
	doc := loadOpenAPI(t)
	schema := func(name string) map[string]any {
		return doc.resolve(t, map[string]any{"$ref": "#/components/schemas/" + name})
	}
	response := func(path, method, code string) map[string]any {
		op := doc["paths"].(map[string]any)[path].(map[string]any)[method].(map[string]any)
		resp := doc.resolve(t, op["responses"].(map[string]any)[code])
		return doc.resolve(t, resp["content"].(map[string]any)["application/json"].(map[string]any)["schema"])
	}
	s := "x"
	cases := []struct {
		name   string
		schema map[string]any
		v      any
		extra  []string // documented, never written by this type
		// optional are written by this value but not by every one
		// (omitted when they do not apply): documented, not required.
		optional []string
	}{
		{"Message", schema("Message"), protocol.Message{Body: json.RawMessage(`"x"`)}, []string{"version", "edited_at", "deleted", "reply_to", "reactions", "mentions", "mention_all", "changed_ord", "sender_name", "attachments", "sender_blocked"}, nil},
		{"system sender's Message", schema("Message"), protocol.Message{Body: json.RawMessage(`"x"`), SenderName: "Support"},
			[]string{"version", "edited_at", "deleted", "reply_to", "reactions", "mentions", "mention_all", "changed_ord", "attachments", "sender_blocked"}, []string{"sender_name"}},
		{"blocked sender's Message", schema("Message"), (&protocol.Message{Body: json.RawMessage(`"x"`)}).Blocked(),
			[]string{"version", "edited_at", "deleted", "reply_to", "reactions", "mentions", "mention_all", "changed_ord", "sender_name", "attachments"}, []string{"sender_blocked"}},
		{"server conversation", response("/v1/server/conversations/{cid}", "get", "200"), protocol.ServerConversation{}, nil, nil},
		{"server inbox", response("/v1/server/users/{uid}/inbox", "get", "200"), protocol.ServerInbox{}, nil, nil},
		{"server create", response("/v1/server/conversations", "post", "201"), protocol.ConversationCreated{}, nil, nil},
		{"server pending", response("/v1/server/conversations/{cid}/messages", "post", "202"), protocol.SendPending{}, nil, nil},
		{"changed Message", schema("Message"), protocol.Message{Body: json.RawMessage(`"x"`), Version: 2, EditedAt: &time.Time{},
			Deleted: true, ReplyTo: 1, Reactions: []protocol.Reaction{{Emoji: "x", Count: 1}}, Mentions: []int64{1}, MentionAll: true, ChangedOrd: 3, SenderName: "S",
			Attachments: []protocol.Attachment{{}}}, []string{"sender_blocked"},
			[]string{"version", "edited_at", "deleted", "reply_to", "reactions", "mentions", "mention_all", "changed_ord", "sender_name", "attachments"}},
		{"Attachment", schema("Attachment"), protocol.Attachment{}, []string{"sha256", "width", "height", "thumbnail"}, nil},
		{"Attachment of an image", schema("Attachment"), protocol.Attachment{SHA256: "x", Width: 1, Height: 1, Thumbnail: &protocol.Thumbnail{}},
			nil, []string{"sha256", "width", "height", "thumbnail"}},
		{"upload", response("/v1/conversations/{cid}/uploads", "post", "201"), protocol.Upload{},
			[]string{"sha256", "width", "height", "key", "url", "url_expires_at", "part_size", "parts", "parts_left"}, nil},
		{"upload in parts", response("/v1/conversations/{cid}/uploads/{id}", "get", "200"), protocol.Upload{SHA256: "x", Width: 1, Height: 1,
			Key: "k", URL: "u", URLExpiresAt: time.Now(), PartSize: 1, Parts: []protocol.UploadPart{{}}, PartsLeft: 1}, nil,
			[]string{"sha256", "width", "height", "key", "url", "url_expires_at", "part_size", "parts", "parts_left"}},
		{"upload part", response("/v1/conversations/{cid}/uploads/{id}/complete", "post", "200")["properties"].(map[string]any)["parts"].(map[string]any)["items"].(map[string]any), protocol.UploadPart{}, nil, nil},
		{"attachment URL", response("/v1/conversations/{cid}/attachments/{id}", "get", "200"), protocol.AttachmentURL{}, nil, nil},
		{"UpdateEntry (inbox.AppendEntries)", schema("UpdateEntry"), protocol.Entry{Kind: protocol.KindUpdate, Message: &protocol.Message{Body: json.RawMessage(`"x"`)}}, nil, nil},
		{"change pending", response("/v1/conversations/{cid}/messages/{seq}", "patch", "202"), protocol.ChangePending{}, nil, nil},
		{"report", response("/v1/conversations/{cid}/messages/{seq}/report", "post", "201"), protocol.Report{}, nil, nil},
		{"report pending", response("/v1/conversations/{cid}/messages/{seq}/report", "post", "202"), protocol.ReportPending{}, nil, nil},
		{"ServerReport", schema("ServerReport"), protocol.ServerReport{}, []string{"resolution", "resolution_note", "resolved_by", "resolved_at"}, nil},
		{"resolved ServerReport", schema("ServerReport"), protocol.ServerReport{Resolution: "x", ResolutionNote: "x", ResolvedBy: "x", ResolvedAt: &time.Time{}}, nil,
			[]string{"resolution", "resolution_note", "resolved_by", "resolved_at"}},
		{"reports page", response("/v1/server/reports", "get", "200"), protocol.ServerReports{}, []string{"next"}, nil},
		{"reports page with next", response("/v1/server/reports", "get", "200"), protocol.ServerReports{Next: "x"}, nil, []string{"next"}},
		{"Record", schema("Record"), protocol.Record{}, []string{"role"}, nil},
		{"Record of a member", schema("Record"), protocol.Record{Role: "member"}, nil, []string{"role"}},
		{"MessageEntry", schema("MessageEntry"), protocol.Entry{Kind: protocol.KindMessage, Message: &protocol.Message{Body: json.RawMessage(`"x"`)}}, nil, nil},
		{"RecordEntry", schema("RecordEntry"), protocol.Entry{Kind: protocol.KindRecord, Record: &protocol.Record{}}, nil, nil},
		// The gateway's hand-written entries (inbox.AppendEntries) against the same schemas.
		{"MessageEntry (inbox.AppendEntries)", schema("MessageEntry"), inbox.NewEntry(0, 0, &protocol.Message{Body: json.RawMessage(`"x"`)}), nil, nil},
		{"RecordEntry (inbox.AppendEntries)", schema("RecordEntry"), inbox.NewEntry(0, 0, &protocol.Record{}), nil, nil},
		{"SyncPage", schema("SyncPage"), protocol.SyncPage{}, []string{"large"}, nil},
		{"SyncPage with large", schema("SyncPage"), protocol.SyncPage{Large: []protocol.LargeConv{{}}}, nil, []string{"large"}},
		{"TooLong", schema("TooLong"), protocol.TooLong{NextPage: &s}, []string{"large"}, nil},
		{"TooLong with large", schema("TooLong"), protocol.TooLong{NextPage: &s, Large: []protocol.LargeConv{{}}}, nil, []string{"large"}},
		{"LargeConv", schema("LargeConv"), protocol.LargeConv{}, nil, nil},
		{"Polling", schema("Polling"), protocol.Polling{}, []string{"reconnect"}, nil},
		{"Polling with the crash hint", schema("Polling"), protocol.Polling{Reconnect: &protocol.Reconnect{}}, nil, []string{"reconnect"}},
		{"Error", schema("Error"), protocol.ErrorBody{}, nil, nil},
		{"list", response("/v1/conversations", "get", "200"), protocol.ConversationList{}, nil, nil},
		{"create", response("/v1/conversations", "post", "201"), protocol.ConversationCreated{}, nil, nil},
		{"history", response("/v1/conversations/{cid}/messages", "get", "200"), protocol.History{}, nil, nil},
		{"pending", response("/v1/conversations/{cid}/messages", "post", "202"), protocol.SendPending{}, nil, nil},
		{"accepted", response("/v1/conversations/{cid}/read", "post", "202"), protocol.Accepted{}, nil, nil},
		{"dev token", response("/v1/dev/token", "post", "200"), protocol.DevToken{}, nil, nil},
		{"receipts", response("/v1/conversations/{cid}/receipts", "get", "200"), protocol.ReceiptList{}, nil, nil},
		{"settings", response("/v1/settings", "get", "200"), protocol.Settings{}, nil, nil},
		{"settings changed", response("/v1/settings", "patch", "200"), protocol.Settings{}, nil, nil},
		{"presence", response("/v1/presence", "get", "200"), protocol.PresenceList{}, nil, nil},
		{"search", response("/v1/search", "get", "200"), protocol.SearchResults{}, []string{"next_cursor", "estimated_total"}, nil},
		{"search's first page with more", response("/v1/search", "get", "200"), protocol.SearchResults{NextCursor: "x", EstimatedTotal: new(int64)},
			nil, []string{"next_cursor", "estimated_total"}},
		{"SearchResult", schema("SearchResult"), protocol.SearchResult{Message: protocol.Message{Body: json.RawMessage(`"x"`)}}, nil, nil},
		{"SnippetPart", schema("SnippetPart"), protocol.SnippetPart{}, []string{"match"}, nil},
		{"matched SnippetPart", schema("SnippetPart"), protocol.SnippetPart{Match: true}, nil, []string{"match"}},
	}
	for _, c := range cases {
		raw, err := json.Marshal(c.v)
		require.NoError(t, err)
		var wire map[string]any
		require.NoError(t, json.Unmarshal(raw, &wire), c.name)
		var written, writtenRequired []string
		for k := range wire {
			written = append(written, k)
			if !slices.Contains(c.optional, k) {
				writtenRequired = append(writtenRequired, k)
			}
		}
		var required []string
		for _, r := range c.schema["required"].([]any) {
			required = append(required, r.(string))
		}
		var props []string
		for k := range c.schema["properties"].(map[string]any) {
			props = append(props, k)
		}
		require.ElementsMatch(t, writtenRequired, required, "%s (%s): required = what the server always writes", c.name, reflect.TypeOf(c.v))
		require.ElementsMatch(t, append(written, c.extra...), props, "%s: properties", c.name)
	}
}
