// Package chart draws the line charts of the benchmark report
// (docs/benchmarks.md) as PNG files with the standard library alone:
// image/png and a 5x7 pixel font of its own, so that the harness needs
// no chart module and its pictures come out the same on every machine.
//
//	ch := chart.Line{Title: "push latency", XLabel: "percentile", YLabel: "ms", LogY: true,
//		Series: []chart.Series{{Name: "1,000 msg/s", X: xs, Y: ys, Color: chart.Palette[0]}}}
//	err := ch.WritePNG("docs/images/e2e-latency.png")
//
// It owns drawing only: what a chart shows is the bench package's. The
// server binary must not link it (cmd/inboxd's TestServerLinksNoBench
// refuses image/png).
package chart
