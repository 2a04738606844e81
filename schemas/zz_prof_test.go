package schemas
import ("testing";"io";"math/rand/v2";"crypto/sha256"
 "github.com/parquet-go/parquet-go";"github.com/parquet-go/parquet-go/compress/zstd")
var zzRows []Trajectory
func zzInit() []Trajectory {
	if zzRows != nil { return zzRows }
	rng := rand.New(rand.NewPCG(42, 42))
	rows := make([]Trajectory, 2000)
	for i := range rows { rows[i] = genTrajectory(rng, genOptions{promptLen: 200, respLen: 2000, maxInteractions: 3, textPerToken: 4}, i) }
	zzRows = rows
	return rows
}
func zzWrite(b *testing.B, opts ...parquet.WriterOption) {
	rows := zzInit()
	var n int64; for i := range rows { n += logicalBytes(&rows[i]) }
	b.ResetTimer()
	var cpu float64
	for i := 0; i < b.N; i++ {
		_, c := measure(func(){
		h := sha256.New()
		w := parquet.NewGenericWriter[Trajectory](io.MultiWriter(io.Discard, h), append([]parquet.WriterOption{parquet.Compression(&zstd.Codec{Level: zstd.SpeedFastest}), parquet.MaxRowsPerRowGroup(RowGroupRows)}, opts...)...)
		if _, err := w.Write(rows); err != nil { b.Fatal(err) }
		if err := w.Close(); err != nil { b.Fatal(err) }
		})
		cpu += c.Seconds()
	}
	b.ReportMetric(float64(n)*float64(b.N)/1e6/cpu, "MB/cpu-s")
}
func BenchmarkZZWriteBase(b *testing.B){ zzWrite(b) }
func BenchmarkZZWriteSkipBounds(b *testing.B){ zzWrite(b, parquet.SkipPageBounds("response_ids","list","element"), parquet.SkipPageBounds("behavior_logprobs","list","element"), parquet.SkipPageBounds("token_source","list","element"), parquet.SkipPageBounds("prompt_ids","list","element")) }
func BenchmarkZZWriteBigPages(b *testing.B){ zzWrite(b, parquet.PageBufferSize(1<<20)) }
func BenchmarkZZWriteNoCompress(b *testing.B){ zzWrite(b, parquet.Compression(&parquet.Uncompressed)) }
func BenchmarkZZWriteDelta(b *testing.B){ zzWrite(b, parquet.DefaultEncodingFor(parquet.Int32, &parquet.DeltaBinaryPacked)) }
func BenchmarkZZWriteDeltaNoComp(b *testing.B){ zzWrite(b, parquet.DefaultEncodingFor(parquet.Int32, &parquet.DeltaBinaryPacked), parquet.Compression(&parquet.Uncompressed)) }
func BenchmarkZZBulk(b *testing.B){
	rows := zzInit()
	var n int64; for i := range rows { n += logicalBytes(&rows[i]) }
	var buf bytesBuf
	w := parquet.NewGenericWriter[Trajectory](&buf, parquet.Compression(&zstd.Codec{Level: zstd.SpeedFastest}), parquet.MaxRowsPerRowGroup(RowGroupRows))
	w.Write(rows); w.Close()
	b.ResetTimer()
	var cpu float64
	for i := 0; i < b.N; i++ {
		_, c := measure(func(){ if _, err := ReadTrajectoriesBulk(buf.b); err != nil { b.Fatal(err) } })
		cpu += c.Seconds()
	}
	b.ReportMetric(float64(n)*float64(b.N)/1e6/cpu, "MB/cpu-s")
}
type bytesBuf struct{ b []byte }
func (w *bytesBuf) Write(p []byte) (int, error) { w.b = append(w.b, p...); return len(p), nil }
