package serve

import (
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// serverMetrics are what GET /metrics exposes in Prometheus' text format:
// requests and their latency per endpoint, the engine's queue and batch,
// the tokens it sampled (tokens/s is their rate) and the weights' policy
// version. Each Server has its own registry.
type serverMetrics struct {
	reg      *prometheus.Registry
	requests *prometheus.CounterVec
	latency  *prometheus.HistogramVec
}

func newServerMetrics(s *Server) *serverMetrics {
	m := &serverMetrics{reg: prometheus.NewRegistry()}
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "aipo_serve_requests_total", Help: "HTTP requests answered, by endpoint and status code.",
	}, []string{"endpoint", "code"})
	m.latency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "aipo_serve_request_duration_seconds", Help: "Time from a request's arrival to its last byte, by endpoint.",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 18), // 1 ms .. ~131 s
	}, []string{"endpoint"})
	m.reg.MustRegister(m.requests, m.latency,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aipo_serve_queue_depth", Help: "Requests waiting for the engine."},
			func() float64 { return float64(s.eng.Stats().Queued) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aipo_serve_active_sequences", Help: "Sequences in the engine's current batch."},
			func() float64 { return float64(s.eng.Stats().Active) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "aipo_serve_generated_tokens_total", Help: "Tokens sampled by the engine (tokens/s: its rate)."},
			func() float64 { return float64(s.eng.Stats().Generated) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "aipo_serve_fed_tokens_total", Help: "Tokens fed to the model (prompts, suffixes and sampled tokens)."},
			func() float64 { return float64(s.eng.Stats().Fed) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "aipo_serve_policy_version", Help: "Policy version of the weights being served."},
			func() float64 { return float64(s.eng.Info().PolicyVersion) }),
	)
	return m
}

// handler is GET /metrics.
func (m *serverMetrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// observe records one answered request.
func (m *serverMetrics) observe(endpoint string, code int, start time.Time) {
	m.requests.WithLabelValues(endpoint, strconv.Itoa(code)).Inc()
	m.latency.WithLabelValues(endpoint).Observe(time.Since(start).Seconds())
}

// statusWriter remembers the status code a handler wrote.
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes a stream's flush through.
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }
