package main

import (
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Command     []string          `yaml:"command"`
		Environment map[string]string `yaml:"environment"`
		Healthcheck struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
		DependsOn map[string]struct {
			Condition string `yaml:"condition"`
		} `yaml:"depends_on"`
	} `yaml:"services"`
}

// docker-compose.yml runs real subcommands with real flags: every inboxd
// service's command exists, every INBOXD_*/DATABASE_URL it sets is a flag of
// that command, and its health check probes the port it listens on.
func TestComposeMatchesTheBinary(t *testing.T) {
	raw, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var cf composeFile
	require.NoError(t, yaml.Unmarshal(raw, &cf))
	seen := map[string]bool{}
	for name, svc := range cf.Services {
		if svc.Image != "inboxd:latest" {
			continue
		}
		require.NotEmpty(t, svc.Command, "service %s has a command", name)
		cmd := svc.Command[0]
		_, ok := commands[cmd]
		require.True(t, ok, "service %s runs inboxd %s, which exists", name, cmd)
		seen[cmd] = true
		envs := map[string]bool{}
		for _, d := range flagsOf(t, cmd) {
			envs[d.env] = true
		}
		for k := range svc.Environment {
			if strings.HasPrefix(k, "INBOXD_") || k == "DATABASE_URL" {
				require.True(t, envs[k], "service %s sets %s, a setting of inboxd %s", name, k, cmd)
			}
		}
		if cmd == "migrate" {
			require.Equal(t, "service_healthy", svc.DependsOn["postgres"].Condition)
			continue
		}
		require.Equal(t, 2, svc.Deploy.Replicas, "service %s is scaled to 2", name)
		require.Equal(t, "service_completed_successfully", svc.DependsOn["migrate"].Condition)
		hc := strings.Join(svc.Healthcheck.Test, " ")
		require.Contains(t, hc, "/usr/local/bin/inboxd healthcheck --url")
		addr := svc.Environment["INBOXD_HTTP_ADDR"]
		port := addr[strings.LastIndex(addr, ":"):]
		require.Contains(t, hc, "127.0.0.1"+port+"/readyz", "service %s probes the port it listens on", name)
	}
	for _, c := range []string{"migrate", "fanout", "gateway"} {
		require.True(t, seen[c], "compose runs inboxd %s", c)
	}
	for _, k := range []string{"kafka1", "kafka2", "kafka3"} {
		env := cf.Services[k].Environment
		require.Equal(t, "3", env["KAFKA_DEFAULT_REPLICATION_FACTOR"], k)
		require.Equal(t, "2", env["KAFKA_MIN_INSYNC_REPLICAS"], k)
		require.Contains(t, env["KAFKA_PROCESS_ROLES"], "controller", "%s runs KRaft", k)
	}
	require.Equal(t, "3", cf.Services["fanout"].Environment["INBOXD_REPLICATION_FACTOR"])

	// The compose tool's own validation, where Debian's docker-compose is installed.
	if dc, err := exec.LookPath("docker-compose"); err == nil {
		cmd := exec.Command(dc, "-f", "../../docker-compose.yml", "config", "-q")
		cmd.Env = append(os.Environ(), "INBOXD_AUTH_SECRET=test")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "docker-compose config: %s", out)
	} else {
		t.Log("docker-compose not installed: schema validation by the compose tool skipped")
	}
}
