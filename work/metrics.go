package work

import (
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/lanes-dev/lanes/membership"
)

// laneStats are one lane's counters on this instance. They live as long as
// the worker, so a lane that leaves and comes back keeps counting.
type laneStats struct {
	processed   atomic.Uint64 // acked after success
	failed      atomic.Uint64 // handler failures (each attempt)
	parked      atomic.Uint64 // republished to the dead-letter subject, then acked
	terminated  atomic.Uint64 // +TERM at the handler's word
	handedBack  atomic.Uint64 // given back unfinished (nak) on an abort or a hand-over
	unconfirmed atomic.Uint64 // settled, but the server did not confirm the ack: it runs again
	since       atomic.Int64  // unix nanos the running handler started; 0 when idle
	usual       atomic.Int64  // moving average of the processing time, nanos; 0 before the first
	serving     atomic.Bool
	outage      atomic.Pointer[LaneOutage]        // the message waits because the handler could not run; nil: no
	window      atomic.Pointer[membership.Window] // a key-parallel lane's window; nil: serial, or not served
	resyncs     atomic.Uint64                     // key-parallel sessions begun again (a pin lost, an ack not confirmed)
	hist        prometheus.Observer               // nil without metrics
}

func (s *laneStats) begin(now time.Time) { s.since.Store(now.UnixNano()) }
func (s *laneStats) end()                { s.since.Store(0) }

func (s *laneStats) done(took time.Duration) {
	if s.hist != nil {
		s.hist.Observe(took.Seconds())
	}
	if u := s.usual.Load(); u == 0 {
		s.usual.Store(int64(took))
	} else {
		s.usual.Store(u - u/8 + int64(took)/8)
	}
}

// inFlightAge is how long the running handler has run, 0 when idle.
func (s *laneStats) inFlightAge(now time.Time) time.Duration {
	if t := s.since.Load(); t != 0 {
		return now.Sub(time.Unix(0, t))
	}
	return 0
}

// Metrics serves a worker's figures to Prometheus: per lane processed,
// failed, parked and terminated counts, a processing time histogram and
// the age of the message in flight; per instance the members seen, the
// lanes served and the instances the design's backlog wants.
type Metrics struct {
	reg  *prometheus.Registry
	hist *prometheus.HistogramVec
	w    atomic.Pointer[Worker]
}

// NewMetrics makes a registry with the worker's series and the Go and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{reg: prometheus.NewRegistry()}
	m.hist = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "lanes_work_processing_seconds",
		Help:    "Time the handler took per attempt.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 300},
	}, []string{"stream", "lane"})
	m.reg.MustRegister(m.hist, (*workCollector)(m), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Handler serves the metrics in the Prometheus text format.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

func (m *Metrics) observer(stream, lane string) prometheus.Observer {
	if m == nil {
		return nil
	}
	return m.hist.WithLabelValues(stream, lane)
}

var (
	descProcessed  = prometheus.NewDesc("lanes_work_processed_total", "Messages processed and acked.", []string{"stream", "lane"}, nil)
	descFailed     = prometheus.NewDesc("lanes_work_failed_total", "Handler failures (every attempt).", []string{"stream", "lane"}, nil)
	descParked     = prometheus.NewDesc("lanes_work_parked_total", "Messages republished to the dead-letter subject, then acked.", []string{"stream", "lane"}, nil)
	descTerminated = prometheus.NewDesc("lanes_work_terminated_total", "Messages terminated (+TERM) at the handler's word.", []string{"stream", "lane"}, nil)
	descAge        = prometheus.NewDesc("lanes_work_in_flight_age_seconds", "How long the message in flight has been processed (0: idle).", []string{"stream", "lane"}, nil)
	descServing    = prometheus.NewDesc("lanes_work_serving", "1 while this instance serves the lane.", []string{"stream", "lane"}, nil)
	descOutage     = prometheus.NewDesc("lanes_work_handler_outage", "1 while the lane's message waits because the handler could not run (a missing program, a refused connection, a closed stdout): nothing is parked, the handler is tried again.", []string{"stream", "lane"}, nil)
	descWindow     = prometheus.NewDesc("lanes_work_window", "A key-parallel lane's keys in flight: the messages it may have out at once (absent on a serial lane).", []string{"stream", "lane"}, nil)
	descHeld       = prometheus.NewDesc("lanes_work_window_held", "Messages a key-parallel lane has out: running, or waiting behind their key.", []string{"stream", "lane"}, nil)
	descKeysRun    = prometheus.NewDesc("lanes_work_keys_running", "Keys of a key-parallel lane with a message running.", []string{"stream", "lane"}, nil)
	descOldestWait = prometheus.NewDesc("lanes_work_oldest_waiting_seconds", "How long the message that has waited longest behind its key has waited (0: none waits).", []string{"stream", "lane"}, nil)
	descHolder     = prometheus.NewDesc("lanes_work_window_held_by_one_key", "1 while one key's messages fill a key-parallel lane's whole window: no other key of the lane runs.", []string{"stream", "lane", "key"}, nil)
	descResyncs    = prometheus.NewDesc("lanes_work_resyncs_total", "Key-parallel sessions begun again (a pin lost, an ack the server did not confirm).", []string{"stream", "lane"}, nil)
	descMembers    = prometheus.NewDesc("lanes_work_members", "Live instances of the design seen in the membership.", []string{"stream", "design"}, nil)
	descLanes      = prometheus.NewDesc("lanes_work_lanes", "Lanes of the design found on the stream.", []string{"stream", "design"}, nil)
	// The same name, help and labels as lanes inspect -o prometheus writes
	// (render/inspect_prometheus.go), so either source can drive an
	// autoscaler.
	descWanted = prometheus.NewDesc("lanes_work_instances_wanted", "Instances of lanes work the design's backlog can keep busy, for autoscaling: "+
		"one per lane with messages to run (pending or unacknowledged, not paused), at least 1, at most the lane count "+
		"(an instance serves a lane alone: more instances than lanes get none).", []string{"stream", "design"}, nil)
)

type workCollector Metrics

func (c *workCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descProcessed, descFailed, descParked, descTerminated, descAge, descServing, descOutage,
		descWindow, descHeld, descKeysRun, descOldestWait, descHolder, descResyncs, descMembers, descLanes, descWanted} {
		ch <- d
	}
}

func (c *workCollector) Collect(ch chan<- prometheus.Metric) {
	w := c.w.Load()
	if w == nil {
		return
	}
	now := time.Now()
	stream := w.cfg.Stream
	for name, s := range w.laneStatsSnapshot() {
		ch <- prometheus.MustNewConstMetric(descProcessed, prometheus.CounterValue, float64(s.processed.Load()), stream, name)
		ch <- prometheus.MustNewConstMetric(descFailed, prometheus.CounterValue, float64(s.failed.Load()), stream, name)
		ch <- prometheus.MustNewConstMetric(descParked, prometheus.CounterValue, float64(s.parked.Load()), stream, name)
		ch <- prometheus.MustNewConstMetric(descTerminated, prometheus.CounterValue, float64(s.terminated.Load()), stream, name)
		ch <- prometheus.MustNewConstMetric(descAge, prometheus.GaugeValue, s.inFlightAge(now).Seconds(), stream, name)
		serving := 0.0
		if s.serving.Load() {
			serving = 1
		}
		ch <- prometheus.MustNewConstMetric(descServing, prometheus.GaugeValue, serving, stream, name)
		outage := 0.0
		if s.outage.Load() != nil {
			outage = 1
		}
		ch <- prometheus.MustNewConstMetric(descOutage, prometheus.GaugeValue, outage, stream, name)
		if win := s.window.Load(); win != nil {
			ch <- prometheus.MustNewConstMetric(descWindow, prometheus.GaugeValue, float64(win.Size), stream, name)
			ch <- prometheus.MustNewConstMetric(descHeld, prometheus.GaugeValue, float64(win.Held), stream, name)
			ch <- prometheus.MustNewConstMetric(descKeysRun, prometheus.GaugeValue, float64(win.RunningCount), stream, name)
			wait := 0.0
			if win.Oldest != nil {
				wait = now.Sub(win.Oldest.Since).Seconds()
			}
			ch <- prometheus.MustNewConstMetric(descOldestWait, prometheus.GaugeValue, wait, stream, name)
			if win.Holder != "" {
				ch <- prometheus.MustNewConstMetric(descHolder, prometheus.GaugeValue, 1, stream, name, win.Holder)
			}
			ch <- prometheus.MustNewConstMetric(descResyncs, prometheus.CounterValue, float64(s.resyncs.Load()), stream, name)
		}
	}
	st := w.Stats()
	ch <- prometheus.MustNewConstMetric(descMembers, prometheus.GaugeValue, float64(st.Members), stream, w.cfg.Design)
	ch <- prometheus.MustNewConstMetric(descLanes, prometheus.GaugeValue, float64(st.Lanes), stream, w.cfg.Design)
	if lanes, busy, listed := w.busyLanes(); listed {
		ch <- prometheus.MustNewConstMetric(descWanted, prometheus.GaugeValue, float64(instancesWanted(lanes, busy)), stream, w.cfg.Design)
	}
}

// busyLanes counts the design's lanes and those with messages to run
// (a backlog, not paused) as the last listing of the lanes saw them: every
// instance reports the whole design, not its own lanes, so any one of
// them (or the max over them) is the figure. listed is false before the
// first listing. A listing older than Relist is followed by a new one, so
// the figure is at most a scrape behind; listings are otherwise rare on a
// large stream (see checkLanes), and an instance nobody scrapes pays for
// none.
func (w *Worker) busyLanes() (lanes, busy int, listed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.joined && time.Since(w.listedAt) > w.cfg.Relist {
		w.relistSoon()
	}
	for _, l := range w.lanes {
		if l.backlog > 0 && !l.paused {
			busy++
		}
	}
	return len(w.lanes), busy, w.joined
}

// instancesWanted is health.InstancesWanted (work does not import
// health): one instance per busy lane, at least one while there are
// lanes, at most the lanes.
func instancesWanted(lanes, busy int) int {
	if lanes <= 0 {
		return 0
	}
	return min(lanes, max(1, busy))
}
