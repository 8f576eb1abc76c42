package gateway

import (
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
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
	tg := newGateway(t, nil) // dev mode: every route
	registered := tg.g.routePaths()
	sort.Strings(documented)
	sort.Strings(registered)
	require.Equal(t, registered, documented)

	r := (&user{tg: tg}).do(t, "GET", "/openapi.yaml", nil)
	require.Equal(t, http.StatusOK, r.status)
	require.Equal(t, string(openapiYAML), string(r.body))
}
