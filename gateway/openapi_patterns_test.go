package gateway

import (
	"crypto/rand"
	"encoding/base64"
	"math"
	mrand "math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/inboxd/inboxd/events"
)

// The patterns of openapi.yaml say what the server's parsers accept, so
// that a request the document allows is not refused (the fuzz run checks
// that from outside: positive_data_acceptance). These tests hold each
// pattern against the parser it describes, without a server.

// ecmaUnicode is a \uXXXX escape of an ECMA-262 pattern (the dialect of
// OpenAPI), which RE2 writes \x{XXXX}.
var ecmaUnicode = regexp.MustCompile(`\\u([0-9a-fA-F]{4})`)

// compilePattern compiles a pattern of the document with Go's regexp.
func compilePattern(t testing.TB, pattern string) *regexp.Regexp {
	t.Helper()
	re, err := regexp.Compile(ecmaUnicode.ReplaceAllString(pattern, `\x{$1}`))
	require.NoError(t, err, pattern)
	return re
}

// docAt follows keys (and, on a list of parameters, a parameter's name)
// from the document's root, resolving refs on the way.
func (d openapiDoc) docAt(t testing.TB, keys ...string) map[string]any {
	t.Helper()
	cur := map[string]any(d)
	for _, k := range keys {
		switch v := cur[k].(type) {
		case map[string]any:
			cur = d.resolve(t, v)
		case []any: // parameters: the next key is a name
			cur = map[string]any{}
			for _, p := range v {
				pm := d.resolve(t, p)
				cur[pm["name"].(string)] = pm
			}
		default:
			require.Failf(t, "no such key", "%s in %v", k, keys)
		}
	}
	return cur
}

// TestOpenAPIMemberPagePattern: the page of the member and receipt lists is
// what queryInt takes (0..MaxInt64), written without sign or leading zeros.
func TestOpenAPIMemberPagePattern(t *testing.T) {
	doc := loadOpenAPI(t)
	re := compilePattern(t, doc.docAt(t, "components", "parameters", "memberPage", "schema")["pattern"].(string))
	for _, path := range []string{"/v1/conversations/{cid}/members", "/v1/conversations/{cid}/receipts"} {
		require.Equal(t, "page", doc.docAt(t, "paths", path, "get", "parameters", "page")["name"], path)
	}
	accepted := func(s string) bool {
		_, err := queryInt(url.Values{"page": {s}}, "page", 0, 0, math.MaxInt64)
		return err == nil
	}
	canonical := []string{"0", "1", "9", "10", strconv.FormatInt(math.MaxInt64, 10), "9223372036854775808",
		"9999999999999999999", "10000000000000000000", "18446744073709551615"}
	max := strconv.FormatInt(math.MaxInt64, 10)
	for i := range max {
		for _, d := range "0123456789" {
			if i == 0 && d == '0' {
				continue
			}
			s := max[:i] + string(d) + max[i+1:]
			canonical = append(canonical, s, s[:len(s)-1])
		}
	}
	for range 2000 {
		canonical = append(canonical, strconv.FormatInt(mrand.Int64N(math.MaxInt64)>>mrand.IntN(63), 10),
			strconv.FormatUint(mrand.Uint64()|1<<63, 10))
	}
	for _, s := range canonical {
		require.Equal(t, accepted(s), re.MatchString(s), "page=%s", s)
	}
	// Other spellings the parser may take; the document need not.
	for _, s := range []string{"", "-1", "+1", "-0", "01", "1.0", "1e3", " 1", "x", "0x10"} {
		if re.MatchString(s) {
			require.True(t, accepted(s), "page=%q", s)
		}
	}
}

// TestOpenAPIListPagePattern: the conversation list's page is a page number
// (what parsePageToken takes as one) or a next_page value, and the
// server's next_page values match the second form, never the first.
func TestOpenAPIListPagePattern(t *testing.T) {
	doc := loadOpenAPI(t)
	branches := doc.docAt(t, "paths", "/v1/conversations", "get", "parameters", "page", "schema")["anyOf"].([]any)
	require.Len(t, branches, 2)
	number := branches[0].(map[string]any)
	numberRe := compilePattern(t, number["pattern"].(string))
	maxLen := number["maxLength"].(int)
	isNumber := func(s string) bool { return numberRe.MatchString(s) && utf8.RuneCountInString(s) <= maxLen }
	tokenPattern := branches[1].(map[string]any)["pattern"].(string)
	tokenRe := compilePattern(t, tokenPattern)
	// The fuzz run's hooks tell a made-up next_page by this pattern.
	hooks, err := os.ReadFile("../scripts/fuzz/hooks.py")
	require.NoError(t, err)
	require.Contains(t, string(hooks), `re.compile(r"`+tokenPattern+`")`, "scripts/fuzz/hooks.py repeats the next_page pattern")

	for _, s := range []string{"0", "1", "2", "9999999", "10000000", "0000001", "00000001", "0000000", "-1", "+1", "", "1.5"} {
		p, err := parsePageToken(s)
		numbered := err == nil && p.number > 0
		if isNumber(s) {
			require.True(t, numbered, "page=%q", s)
		}
		if numbered {
			require.True(t, isNumber(s), "page=%q", s)
		}
		require.False(t, tokenRe.MatchString(s), "page=%q is no next_page", s)
	}
	for n := int64(1); n <= 9999999; n = n*3 + 1 {
		require.True(t, isNumber(strconv.FormatInt(n, 10)), "page=%d", n)
	}
	_, err = parsePageToken("+5")
	require.Error(t, err, "page=+5: numbers of the query are strict")
	for range 2000 {
		tok := pageToken{byVersion: mrand.IntN(2) == 0, version: mrand.Int64() >> mrand.IntN(63), pinned: mrand.IntN(2) == 0,
			activity: time.UnixMicro(mrand.Int64N(1 << 52)), conv: 1 + mrand.Int64N(math.MaxInt64>>mrand.IntN(63))}
		s := tok.String()
		require.True(t, tokenRe.MatchString(s), "next_page %q (%+v)", s, tok)
		require.False(t, isNumber(s), "next_page %q", s)
		_, err := parsePageToken(s)
		require.NoError(t, err, "next_page %q", s)
	}
}

// TestOpenAPIEmojiPattern: the emoji pattern refuses exactly the runes
// events.ValidEmoji does (whitespace, control characters; NUL among them).
// The byte limit is not a pattern's: maxLength counts characters.
func TestOpenAPIEmojiPattern(t *testing.T) {
	doc := loadOpenAPI(t)
	schema := doc.docAt(t, "paths", "/v1/conversations/{cid}/messages/{seq}/reaction", "put", "requestBody", "content", "application/json", "schema", "properties", "emoji")
	re := compilePattern(t, schema["pattern"].(string))
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		if valid, matches := events.ValidEmoji(s) == nil, re.MatchString(s); valid != matches {
			t.Fatalf("emoji %U: valid %v, the pattern matches %v", r, valid, matches)
		}
	}
	require.True(t, re.MatchString("👍🏽"))
	require.False(t, re.MatchString("👍 👍"))
}

// TestOpenAPIRequestTextHasNoNUL: every string of every request body
// refuses NUL, as DecodeJSON does anywhere in a body, so that a text the
// document allows is one the server takes. Bodies of bytes (a sealed
// file's PUT) are no text. (The branches of an anyOf or a
// oneOf only add to the property's own schema, checked here.)
func TestOpenAPIRequestTextHasNoNUL(t *testing.T) {
	doc := loadOpenAPI(t)
	var check func(where string, v any)
	check = func(where string, v any) {
		s := doc.resolve(t, v)
		if s == nil {
			return
		}
		if s["type"] == "string" {
			if _, ok := s["enum"]; !ok {
				p, ok := s["pattern"].(string)
				require.True(t, ok, "%s: a string without a pattern", where)
				re := compilePattern(t, p)
				require.False(t, re.MatchString("a\x00b"), "%s: pattern %s takes NUL", where, p)
			}
		}
		for name, p := range mapOf(s["properties"]) {
			check(where+"."+name, p)
		}
		if items, ok := s["items"]; ok {
			check(where+"[]", items)
		}
		for i, b := range listOf(s["allOf"]) {
			check(where+"/allOf/"+strconv.Itoa(i), b)
		}
	}
	n := 0
	for path, ops := range mapOf(doc["paths"]) {
		for method, op := range mapOf(ops) {
			body, ok := mapOf(op)["requestBody"]
			if !ok {
				continue
			}
			for media, c := range mapOf(doc.resolve(t, body)["content"]) {
				if media != "application/json" {
					continue // bytes, not text: the dev store's PUT of a sealed file
				}
				check(strings.ToUpper(method)+" "+path+" "+media, mapOf(c)["schema"])
				n++
			}
		}
	}
	require.Greater(t, n, 10)
}

// TestOpenAPIWebSocketKeyPattern: Sec-WebSocket-Key is the base64 of 16
// bytes, what gorilla/websocket's upgrader checks; every key a client makes
// matches.
func TestOpenAPIWebSocketKeyPattern(t *testing.T) {
	doc := loadOpenAPI(t)
	re := compilePattern(t, doc.docAt(t, "paths", "/v1/ws", "get", "parameters", "Sec-WebSocket-Key", "schema")["pattern"].(string))
	for range 1000 {
		b := make([]byte, 16)
		_, _ = rand.Read(b)
		k := base64.StdEncoding.EncodeToString(b)
		require.True(t, re.MatchString(k), k)
	}
	for _, c := range "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/" {
		k := strings.Repeat("A", 21) + string(c) + "=="
		require.True(t, re.MatchString(k), k)
		b, err := base64.StdEncoding.DecodeString(k)
		require.NoError(t, err, k)
		require.Len(t, b, 16, k)
	}
	for _, k := range []string{"", "dGhlIHNhbXBsZSBub25jZQ", "dGhlIHNhbXBsZSBub25jZQ=", "dGhlIHNhbXBsZSBub25jZQ===", "dGhlIHNhbXBsZSBub25j"} {
		require.False(t, re.MatchString(k), k)
	}
}

func mapOf(v any) map[string]any { m, _ := v.(map[string]any); return m }
func listOf(v any) []any         { l, _ := v.([]any); return l }

// TestOpenAPISearchQPattern: the pattern of search's q takes exactly the
// one-character questions searchQueryOf does (not all white space, no
// NUL); byte and term limits are the server's (maxLength counts
// characters).
func TestOpenAPISearchQPattern(t *testing.T) {
	doc := loadOpenAPI(t)
	re := compilePattern(t, doc.docAt(t, "paths", "/v1/search", "get", "parameters", "q", "schema")["pattern"].(string))
	accepted := func(q string) bool {
		r := &http.Request{URL: &url.URL{RawQuery: url.Values{"q": {q}}.Encode()}}
		_, err := searchQueryOf(r)
		return err == nil
	}
	for r := rune(0); r <= utf8.MaxRune; r++ {
		if !utf8.ValidRune(r) {
			continue
		}
		s := string(r)
		if a, m := accepted(s), re.MatchString(s); a != m {
			t.Fatalf("q=%U: accepted %v, the pattern matches %v", r, a, m)
		}
	}
	for _, q := range []string{"hello", " a ", `"a b"`, "x\u3000", "\u00a0\u00a0y"} {
		require.True(t, accepted(q), q)
		require.True(t, re.MatchString(q), q)
	}
	for _, q := range []string{"", " ", "\t\n", "\u3000\u0085", "a\x00b"} {
		require.False(t, accepted(q), "%q", q)
		require.False(t, re.MatchString(q), "%q", q)
	}
}

// TestOpenAPISearchCursorPattern: every cursor the search issues, of
// either order, matches the document's pattern of cursor, and a string the
// pattern refuses is never a cursor decodeCursor takes.
func TestOpenAPISearchCursorPattern(t *testing.T) {
	doc := loadOpenAPI(t)
	pattern := doc.docAt(t, "paths", "/v1/search", "get", "parameters", "cursor", "schema")["pattern"].(string)
	re := compilePattern(t, pattern)
	// The fuzz run's hooks tell a made-up cursor by this pattern.
	hooks, err := os.ReadFile("../scripts/fuzz/hooks.py")
	require.NoError(t, err)
	require.Contains(t, string(hooks), `re.compile(r"`+pattern+`")`, "scripts/fuzz/hooks.py repeats the cursor pattern")
	for i := range 5000 {
		relevance := i%2 == 0
		// Keys a search issues: times in years 1..9999, ids not negative.
		k := searchKey{rank: mrand.Float32() * float32(mrand.IntN(100)), at: mrand.Int64N(253402300799999999) >> mrand.IntN(63),
			cid: mrand.Int64() >> mrand.IntN(63), seq: mrand.Int64() >> mrand.IntN(63)}
		s := encodeCursor(relevance, k)
		require.True(t, re.MatchString(s), "cursor %q of %+v", s, k)
		got, err := decodeCursor(s, relevance)
		require.NoError(t, err, s)
		require.Equal(t, k, *got)
	}
	for range 5000 {
		b := make([]byte, 29)
		_, _ = rand.Read(b)
		s := base64.RawURLEncoding.EncodeToString(b)
		if re.MatchString(s) {
			continue
		}
		for _, relevance := range []bool{false, true} {
			_, err := decodeCursor(s, relevance)
			require.Error(t, err, "cursor %q outside the pattern", s)
		}
	}
}
