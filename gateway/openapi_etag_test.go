package gateway

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/inboxd/inboxd/protocol"
)

// TestOpenAPIETagPattern: the ETag header's documented pattern admits
// both tags sync answers carry, with and without a large list (the fuzzer
// checks response headers against it).
func TestOpenAPIETagPattern(t *testing.T) {
	var doc struct {
		Components struct {
			Headers map[string]struct {
				Schema struct {
					Pattern string `yaml:"pattern"`
				} `yaml:"schema"`
			} `yaml:"headers"`
		} `yaml:"components"`
	}
	require.NoError(t, yaml.Unmarshal(openapiYAML, &doc))
	pattern := doc.Components.Headers["ETag"].Schema.Pattern
	require.NotEmpty(t, pattern)
	re := regexp.MustCompile(pattern)
	for _, tag := range []string{
		etagOf(1796127567853, 94, nil),
		etagOf(1796127567853, 94, []protocol.LargeConv{{ConversationID: 7, LastSeq: 120, ChangeCount: 3}}),
		etagOf(1, 0, []protocol.LargeConv{{ConversationID: 1}, {ConversationID: 9, LastSeq: 1 << 40}}),
	} {
		require.Regexp(t, re, tag)
	}
}
