package plegdprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/plegd/plegd/clients/go/plegdv1"
)

// What the processor costs the collector, per record, in 10,000-record batches as the
// filelog receiver hands them over: one resource whose records come from 100 files (100
// containers), each with log.file.path on the record — the processor looks each file up
// (once, then from its cache) and splits the resource into one per container. Run:
//
//	cd clients/otelcol && go test -run '^$' -bench . -benchmem
//
// ns/record × 10,000 is the CPU time per second at 10,000 records/s.
func BenchmarkConsumeLogs(b *testing.B) {
	for _, tc := range []struct {
		name  string
		onRes bool // container.id on the resource (an SDK's resource), not log.file.path on the record
	}{{"log.file.path-on-record", false}, {"container.id-on-resource", true}} {
		b.Run(tc.name, func(b *testing.B) {
			f := newFakePlegd(&testing.T{})
			var cs []*plegdv1.ContainerInfo
			for i := 0; i < 100; i++ {
				name := fmt.Sprintf("pod-%d", i)
				uid := fmt.Sprintf("uid-%d", i)
				c := testContainer("bench", name, uid, "app", 0, cid(i+1), 0)
				cs = append(cs, c)
				f.addPod(testPod("bench", name, uid, c))
			}
			f.serve(&testing.T{})
			defer f.down()
			cfg := createDefaultConfig()
			cfg.Endpoint = f.endpoint()
			cfg.Labels = []string{"app"}
			cfg.NodeName = "n"
			set := processortest.NewNopSettings(componentType)
			sink := new(consumertest.LogsSink)
			lp, err := NewFactory().CreateLogs(context.Background(), set, cfg, sink)
			if err != nil {
				b.Fatal(err)
			}
			if err := lp.Start(context.Background(), nil); err != nil {
				b.Fatal(err)
			}
			defer lp.Shutdown(context.Background())

			const batch = 10000
			src := plog.NewLogs()
			if tc.onRes {
				for i := 0; i < 100; i++ {
					rl := src.ResourceLogs().AppendEmpty()
					rl.Resource().Attributes().PutStr("container.id", cs[i].Id)
					lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
					for j := 0; j < batch/100; j++ {
						lrs.AppendEmpty().Body().SetStr("a log line of some ordinary length, about eighty bytes long, ok")
					}
				}
			} else {
				lrs := src.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords()
				for j := 0; j < batch; j++ {
					lr := lrs.AppendEmpty()
					lr.Body().SetStr("a log line of some ordinary length, about eighty bytes long, ok")
					lr.Attributes().PutStr("log.file.path", cs[j%100].LogPath)
					lr.Attributes().PutStr("log.iostream", "stdout")
				}
			}
			// Warm the cache, as a running collector has it.
			warm := plog.NewLogs()
			src.CopyTo(warm)
			if err := lp.ConsumeLogs(context.Background(), warm); err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				ld := plog.NewLogs()
				src.CopyTo(ld)
				sink.Reset()
				b.StartTimer()
				if err := lp.ConsumeLogs(context.Background(), ld); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*batch), "ns/record")
			if got := sink.AllLogs()[0].LogRecordCount(); got != batch {
				b.Fatalf("%d records out", got)
			}
			if _, ok := sink.AllLogs()[0].ResourceLogs().At(0).Resource().Attributes().Get("k8s.pod.name"); !ok {
				b.Fatal("not placed")
			}
		})
	}
}
