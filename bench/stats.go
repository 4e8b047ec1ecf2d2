package main

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"time"
)

// percentile of sorted samples, nearest rank.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

func sortedCopy(d []time.Duration) []time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s
}

func median(d []time.Duration) time.Duration { return percentile(sortedCopy(d), 50) }

// row is one line of the table. ours and peer are durations, byte counts or
// rates; lower is better unless higherBetter.
type row struct {
	figure       string
	ours, peer   float64
	unit         string // "time", "bytes", "rate", or "" for text in note
	higherBetter bool
	target       string // e.g. "≤ 1.3× rg"; empty: none
	met          string // "yes", "no", or "" when there is no target
	note         string
}

func (r row) ratio() string {
	if r.peer == 0 || r.ours == 0 {
		return "—"
	}
	return fmt.Sprintf("%.2f×", r.ours/r.peer)
}

func format(v float64, unit string) string {
	switch unit {
	case "time":
		return fmtDur(time.Duration(v))
	case "bytes":
		return fmt.Sprintf("%.1f MB", v/(1<<20))
	case "rate":
		return fmt.Sprintf("%.0f calls/s", v)
	}
	if v == 0 {
		return "—"
	}
	return fmt.Sprintf("%g", v)
}

func fmtDur(d time.Duration) string {
	switch {
	case d == 0:
		return "—"
	case d < time.Millisecond:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	case d < 10*time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	case d < time.Second:
		return fmt.Sprintf("%.1f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

// printTable writes rows as a Markdown table.
func printTable(w io.Writer, rows []row) {
	fmt.Fprintln(w, "| figure | ours | peer | ratio | target | met |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		ours, peer := format(r.ours, r.unit), format(r.peer, r.unit)
		ratio := r.ratio()
		if r.unit == "" {
			ours, peer, ratio = r.note, "—", "—"
		}
		if r.peer == 0 && r.unit != "" {
			peer, ratio = "—", "—"
		}
		fig := r.figure
		if r.note != "" && r.unit != "" {
			fig += " (" + r.note + ")"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s |\n", fig, ours, peer, ratio, dash(r.target), dash(r.met))
	}
}

func dash(s string) string {
	if strings.TrimSpace(s) == "" {
		return "—"
	}
	return s
}

// metBelow says whether v ≤ limit.
func metBelow(v, limit float64) string {
	if v <= limit {
		return "yes"
	}
	return "no"
}
