package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

// checkMonitoring: Prometheus (run for real) scrapes every target it is
// configured with, all up, and loaded every alert rule group; Grafana (not
// run) is provisioned with files that exist and a data source that is the
// file's Prometheus.
func checkMonitoring(t *testing.T, ctx context.Context, tp *topology, composeDir string, logf func(string, ...any)) {
	proms := byCommand(tp, "prom/prometheus", "")
	require.Len(t, proms, 1, "the monitoring profile runs one Prometheus")
	prom := proms[0]
	listen := flagValue(prom.svc.Command, "--web.listen-address")
	port, err := strconv.Atoi(listen[strings.LastIndex(listen, ":")+1:])
	require.NoError(t, err, "--web.listen-address %q", listen)
	addr, err := prom.addr(port)
	require.NoError(t, err)

	// What the translated config scrapes: every static target, the
	// replicas of each dns_sd_config among them.
	var cfg struct {
		RuleFiles     []string `yaml:"rule_files"`
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	raw, err := os.ReadFile(prom.paths[flagValue(prom.svc.Command, "--config.file")])
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(raw, &cfg))
	want := map[string]bool{}
	for _, sc := range cfg.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				want[sc.JobName+" "+tg] = true
			}
		}
	}
	require.NotEmpty(t, want)
	inboxd := byCommand(tp, "inboxd", "")
	for _, in := range inboxd {
		if oneShotService(tp, in.svc) {
			continue
		}
		a, err := in.addr(portOf(t, in))
		require.NoError(t, err)
		found := false
		for k := range want {
			found = found || strings.HasSuffix(k, " "+a)
		}
		require.True(t, found, "Prometheus scrapes %s (%s)", in.name, a)
	}

	var targets struct {
		Data struct {
			ActiveTargets []struct {
				ScrapePool string `json:"scrapePool"`
				ScrapeURL  string `json:"scrapeUrl"`
				Health     string `json:"health"`
				LastError  string `json:"lastError"`
			} `json:"activeTargets"`
		} `json:"data"`
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		require.NoError(t, getJSON(ctx, "http://"+addr+"/api/v1/targets?state=active", &targets))
		up, down := 0, []string{}
		for _, at := range targets.Data.ActiveTargets {
			if at.Health == "up" {
				up++
			} else {
				down = append(down, fmt.Sprintf("%s %s: %s %s", at.ScrapePool, at.ScrapeURL, at.Health, at.LastError))
			}
		}
		if up == len(want) && len(down) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus: %d of %d targets up; not up: %v", up, len(want), down)
		}
		time.Sleep(time.Second)
	}
	jobs := map[string]int{}
	for _, at := range targets.Data.ActiveTargets {
		jobs[at.ScrapePool]++
	}
	logf("Prometheus scrapes every target up: %v", jobs)

	// The alert rules: every group of every rule file is loaded.
	wantGroups := map[string]bool{}
	for _, f := range cfg.RuleFiles {
		raw, err := os.ReadFile(f)
		require.NoError(t, err, "rule file %s", f)
		var rf struct {
			Groups []struct {
				Name string `yaml:"name"`
			} `yaml:"groups"`
		}
		require.NoError(t, yaml.Unmarshal(raw, &rf))
		for _, g := range rf.Groups {
			wantGroups[g.Name] = true
		}
	}
	require.NotEmpty(t, wantGroups, "Prometheus loads alert rules")
	var rules struct {
		Data struct {
			Groups []struct {
				Name  string `json:"name"`
				Rules []any  `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	require.NoError(t, getJSON(ctx, "http://"+addr+"/api/v1/rules", &rules))
	n := 0
	for _, g := range rules.Data.Groups {
		delete(wantGroups, g.Name)
		n += len(g.Rules)
	}
	require.Empty(t, wantGroups, "rule groups Prometheus did not load")
	logf("Prometheus loaded %d alert rule groups (%d rules)", len(rules.Data.Groups), n)

	checkGrafana(t, tp, composeDir, logf)
}

func oneShotService(tp *topology, s *service) bool {
	for _, o := range tp.file.Services {
		if c, ok := o.DependsOn[s.name]; ok && c.Condition == "service_completed_successfully" {
			return true
		}
	}
	return false
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, "GET", url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// checkGrafana checks the Grafana service of the file without running it:
// its provisioning directory exists, every data source is a service of the
// file at a port it declares, every dashboard provider's path holds
// dashboard files the service mounts, and they parse and use a provisioned
// data source type.
func checkGrafana(t *testing.T, tp *topology, composeDir string, logf func(string, ...any)) {
	var graf *service
	for _, s := range tp.file.Services {
		if s.repo() == "grafana/grafana" {
			graf = s
		}
	}
	require.NotNil(t, graf, "the monitoring profile has Grafana")
	require.Equal(t, "service_healthy", graf.DependsOn["prometheus"].Condition, "Grafana waits for Prometheus")
	mounts := map[string]string{} // target -> host path
	for _, v := range graf.Volumes {
		parts := strings.Split(v, ":")
		if strings.HasPrefix(parts[0], ".") {
			mounts[parts[1]] = filepath.Join(composeDir, parts[0])
		}
	}
	prov := mounts["/etc/grafana/provisioning"]
	require.NotEmpty(t, prov, "Grafana's provisioning directory is mounted")

	dsTypes := map[string]bool{}
	files, _ := filepath.Glob(filepath.Join(prov, "datasources", "*.yaml"))
	require.NotEmpty(t, files, "data sources are provisioned")
	for _, f := range files {
		var ds struct {
			Datasources []struct {
				Name, Type, URL string
			} `yaml:"datasources"`
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(raw, &ds), f)
		for _, d := range ds.Datasources {
			host, portS, _ := strings.Cut(strings.TrimPrefix(d.URL, "http://"), ":")
			port, _ := strconv.Atoi(strings.TrimRight(portS, "/"))
			svc := tp.file.Services[host]
			require.NotNil(t, svc, "data source %s: %s is a service of the file", d.Name, d.URL)
			ports, err := svc.containerPorts()
			require.NoError(t, err)
			require.Contains(t, ports, port, "data source %s: %s declares port %d", d.Name, host, port)
			dsTypes[d.Type] = true
		}
	}
	files, _ = filepath.Glob(filepath.Join(prov, "dashboards", "*.yaml"))
	require.NotEmpty(t, files, "dashboards are provisioned")
	dashboards := 0
	for _, f := range files {
		var dp struct {
			Providers []struct {
				Name    string `yaml:"name"`
				Options struct {
					Path string `yaml:"path"`
				} `yaml:"options"`
			} `yaml:"providers"`
		}
		raw, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, yaml.Unmarshal(raw, &dp), f)
		for _, p := range dp.Providers {
			var found []string
			for target, host := range mounts {
				if strings.HasPrefix(target, p.Options.Path+"/") {
					found = append(found, host)
				}
			}
			sort.Strings(found)
			require.NotEmpty(t, found, "dashboard provider %s: Grafana mounts files under %s", p.Name, p.Options.Path)
			for _, host := range found {
				raw, err := os.ReadFile(host)
				require.NoError(t, err)
				var d struct {
					UID        string `json:"uid"`
					Templating struct {
						List []struct {
							Type  string `json:"type"`
							Query string `json:"query"`
						} `json:"list"`
					} `json:"templating"`
					Panels []struct {
						Datasource struct {
							Type string `json:"type"`
						} `json:"datasource"`
					} `json:"panels"`
				}
				require.NoError(t, json.Unmarshal(raw, &d), host)
				require.NotEmpty(t, d.UID, host)
				require.NotEmpty(t, d.Panels, host)
				for _, v := range d.Templating.List {
					if v.Type == "datasource" {
						require.True(t, dsTypes[v.Query], "%s: its data source variable picks a provisioned %s", host, v.Query)
					}
				}
				for _, pn := range d.Panels {
					if pn.Datasource.Type != "" {
						require.True(t, dsTypes[pn.Datasource.Type], "%s: a panel queries a provisioned %s", host, pn.Datasource.Type)
					}
				}
				dashboards++
			}
		}
	}
	logf("Grafana (not run): provisioning of %d dashboard(s) and data sources %v checked against the files", dashboards, keys(dsTypes))
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
