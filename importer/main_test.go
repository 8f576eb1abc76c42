package importer

import (
	"testing"

	"github.com/inboxd/inboxd/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
