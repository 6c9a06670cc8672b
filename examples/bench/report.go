package main

import (
	"fmt"
	"log"
	"os"
	"slices"
	"text/tabwriter"
	"time"
)

// repeat runs f n times and returns each duration.
func repeat(n int, f func() error) ([]time.Duration, error) {
	times := make([]time.Duration, 0, n)
	for range n {
		start := time.Now()
		if err := f(); err != nil {
			return nil, err
		}
		times = append(times, time.Since(start))
	}
	return times, nil
}

// summarize turns durations of runs of perRun steps each into per-step milliseconds.
func summarize(name string, batch int, times []time.Duration, perRun float64) row {
	ms := make([]float64, len(times))
	for i, t := range times {
		ms[i] = float64(t.Nanoseconds()) / 1e6 / perRun
	}
	slices.Sort(ms)
	at := func(q float64) float64 { return ms[int(q*float64(len(ms)-1)+0.5)] }
	return row{Name: name, Batch: batch, Median: at(0.5), P10: at(0.1), P90: at(0.9)}
}

func printTable(rows []row) {
	w := tabwriter.NewWriter(os.Stdout, 2, 4, 2, ' ', 0)
	fmt.Fprintln(w, "measurement\tbatch\tmedian ms\tp10\tp90\ttok/step\ttok/s\tnote")
	for _, r := range rows {
		perStep, tokPerS := "", ""
		if r.PerStep > 0 {
			perStep = fmt.Sprintf("%.2f", r.PerStep)
		}
		if r.TokPerS > 0 {
			tokPerS = fmt.Sprintf("%.0f", r.TokPerS)
		}
		fmt.Fprintf(w, "%s\t%d\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\n", r.Name, r.Batch, r.Median, r.P10, r.P90, perStep, tokPerS, r.Note)
	}
	w.Flush()
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}
