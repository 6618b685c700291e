// The seed's design in Go with franz-go, a peer of `cargo xtask bench` (see ../README.md).
//
// Written from the seed's description, not tuned: a poll loop hands each record to one of a fixed
// set of workers chosen by consistent hashing of its session id (the record key); each worker
// keeps one goroutine per active session, fed through a channel, and evicts it after it has been
// idle; a session goroutine handles its records one at a time and retries a failing record in
// place with exponential backoff and full jitter, so a later record never overtakes it; offsets
// are committed per partition up to the highest contiguous completed offset.
//
// Handler semantics are the shared ones (orderly_benches::workload): a record fails on its first
// attempt when fnv1a64(event-id) % failMod == 0. The handler log format is the shared one
// (orderly_benches::verify).
//
// With -http URL (the benchmark's HTTP scenarios) the handler POSTs each record to URL instead,
// with the headers of `orderly consume --http` (orderly-session, orderly-timestamp,
// orderly-attempt, kafka-h-event-id, kafka-h-seq) and the value as body, through one shared
// net/http client (keep-alive, -http-max-idle idle connections per host); a 2xx answer is a
// success, anything else (or no answer) a failure retried in place like any other.
//
// With -reply-topic T -transactional-id ID (the benchmark's reply scenarios) each completed record
// is answered with one reply (key: the session id, value: its event id) produced to T inside a
// Kafka transaction of franz-go's GroupTransactSession: the poll loop begins a transaction, keeps
// dispatching, and once per -commit-interval stops dispatching, waits until every record it
// dispatched has completed and every reply was acknowledged (franz-go's AbortingFirstErrPromise),
// and ends the transaction with TryCommit, which commits the replies and the polled offsets (all
// of them done) in it, then begins the next; a failed reply aborts it instead. A transaction that
// does not commit (a reply failed, a rebalance aborted it) ends the run with an error: the records
// it covered would have to be handled again, which this peer does not do.
//
// The settings a Go engineer tunes are flags, with the design's own values as defaults:
// -fetch-max-wait (franz-go's default, 5 s), -fetch-max-partition-bytes (franz-go's 1 MiB),
// -workers (8), -worker-chan (1,024 records) and -session-chan (the session channel, 256 records);
// the harness's tuned row sets some of them (../README.md says which and why).
package main

import (
	"bufio"
	"bytes"
	"context"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// fnv1a64 is the shared failure-injection hash (FNV-1a, 64 bits).
func fnv1a64(b []byte) uint64 {
	h := uint64(0xcbf29ce484222325)
	for _, c := range b {
		h ^= uint64(c)
		h *= 0x100000001b3
	}
	return h
}

// The shared retry policy: base 1 ms, factor 2, cap 100 ms, full jitter.
const (
	retryBase   = time.Millisecond
	retryFactor = 2.0
	retryCap    = 100 * time.Millisecond
)

func backoff(retry int) time.Duration {
	ceil := float64(retryBase) * math.Pow(retryFactor, float64(retry-1))
	if ceil > float64(retryCap) {
		ceil = float64(retryCap)
	}
	return time.Duration(rand.Float64() * ceil)
}

func nowUs() int64 { return time.Now().UnixMicro() }

// ---- consistent hashing -------------------------------------------------------------------

type ring struct {
	points []uint32
	owner  map[uint32]int
}

func newRing(workers, vnodes int) *ring {
	r := &ring{owner: map[uint32]int{}}
	for w := 0; w < workers; w++ {
		for v := 0; v < vnodes; v++ {
			h := fnv.New32a()
			fmt.Fprintf(h, "worker-%d-%d", w, v)
			p := h.Sum32()
			r.points = append(r.points, p)
			r.owner[p] = w
		}
	}
	sort.Slice(r.points, func(i, j int) bool { return r.points[i] < r.points[j] })
	return r
}

func (r *ring) lookup(key []byte) int {
	h := fnv.New32a()
	h.Write(key)
	k := h.Sum32()
	i := sort.Search(len(r.points), func(i int) bool { return r.points[i] >= k })
	if i == len(r.points) {
		i = 0
	}
	return r.owner[r.points[i]]
}

// ---- contiguous watermark per partition -----------------------------------------------------

type tp struct {
	topic     string
	partition int32
}

type slot struct {
	offset int64
	done   bool
}

type partitionTracker struct {
	mu        sync.Mutex
	pending   []slot        // dispatched offsets in order, the head not yet done
	index     map[int64]int // offset -> position in pending (relative to base)
	base      int           // how many slots were popped from the head
	watermark int64         // next offset to commit (-1: nothing yet)
	epoch     int32
}

func (t *partitionTracker) dispatched(off int64, epoch int32) {
	t.mu.Lock()
	t.index[off] = t.base + len(t.pending)
	t.pending = append(t.pending, slot{offset: off})
	t.epoch = epoch
	t.mu.Unlock()
}

func (t *partitionTracker) completed(off int64) {
	t.mu.Lock()
	if i, ok := t.index[off]; ok {
		t.pending[i-t.base].done = true
		delete(t.index, off)
		for len(t.pending) > 0 && t.pending[0].done {
			t.watermark = t.pending[0].offset + 1
			t.pending = t.pending[1:]
			t.base++
		}
	}
	t.mu.Unlock()
}

type trackers struct {
	mu sync.Mutex
	m  map[tp]*partitionTracker
	// Records dispatched and not yet completed (with -reply-topic: their reply not yet produced).
	inflight sync.WaitGroup
}

func (ts *trackers) get(k tp) *partitionTracker {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	t, ok := ts.m[k]
	if !ok {
		t = &partitionTracker{index: map[int64]int{}, watermark: -1}
		ts.m[k] = t
	}
	return t
}

func (ts *trackers) offsets() map[string]map[int32]kgo.EpochOffset {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	out := map[string]map[int32]kgo.EpochOffset{}
	for k, t := range ts.m {
		t.mu.Lock()
		w, e := t.watermark, t.epoch
		t.mu.Unlock()
		if w < 0 {
			continue
		}
		if out[k.topic] == nil {
			out[k.topic] = map[int32]kgo.EpochOffset{}
		}
		out[k.topic][k.partition] = kgo.EpochOffset{Epoch: e, Offset: w}
	}
	return out
}

// ---- the handler and its log ----------------------------------------------------------------

// handler writes each completion to the log as it happens (nothing kept in memory); with
// flushEach every line goes out with its own write before the handler returns (S6: SIGKILL).
type handler struct {
	failMod    uint64
	work       time.Duration
	firstUs    atomic.Int64
	firstCpuUs atomic.Int64
	completed  atomic.Int64
	mu         sync.Mutex
	log        *bufio.Writer
	flushEach  bool
	stallKey   string
	stallFrom  int64
	stallUntil int64
	// Closed by the completion that reaches target (as the Parallel Consumer peer's latch and
	// bench-orderly's notify), so the end of a run is seen at once, not at the next poll.
	target  int64
	reached chan struct{}
	// -http: where each record is posted, and the one client shared by every session.
	httpURL    string
	httpClient *http.Client
	// -reply-topic: produces a completed record's reply (nil without replies).
	reply func(r *kgo.Record)
}

// post sends one record to the HTTP endpoint; a 2xx answer is a success.
func (h *handler) post(r *kgo.Record, attempt int) error {
	req, err := http.NewRequest(http.MethodPost, h.httpURL, bytes.NewReader(r.Value))
	if err != nil {
		return err
	}
	req.Header.Set("content-type", "application/octet-stream")
	req.Header.Set("orderly-session", string(r.Key))
	req.Header.Set("orderly-timestamp", strconv.FormatInt(r.Timestamp.UnixMilli(), 10))
	req.Header.Set("orderly-attempt", strconv.Itoa(attempt))
	req.Header.Set("kafka-h-event-id", string(header(r, "event-id")))
	req.Header.Set("kafka-h-seq", string(header(r, "seq")))
	resp, err := h.httpClient.Do(req)
	if err != nil {
		return err
	}
	// Read to the end so the connection goes back to the pool.
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	return nil
}

func header(r *kgo.Record, name string) []byte {
	for _, h := range r.Headers {
		if h.Key == name {
			return h.Value
		}
	}
	return nil
}

func (h *handler) handle(r *kgo.Record, attempt int) error {
	if h.firstUs.Load() == 0 && h.firstUs.CompareAndSwap(0, nowUs()) {
		h.firstCpuUs.Store(cpuUs())
	}
	if h.work > 0 {
		time.Sleep(h.work)
	}
	id := header(r, "event-id")
	if attempt == 1 && h.failMod != 0 && fnv1a64(id)%h.failMod == 0 {
		return fmt.Errorf("injected")
	}
	if h.httpURL != "" {
		if err := h.post(r, attempt); err != nil {
			return err
		}
	}
	if h.stallKey != "" && string(r.Key) == h.stallKey {
		if since := (nowUs() - h.firstUs.Load()) / 1000; since >= h.stallFrom && since < h.stallUntil {
			return fmt.Errorf("stalled")
		}
	}
	h.mu.Lock()
	fmt.Fprintf(h.log, "%s %s %s %d %d %d\n", r.Key, header(r, "seq"), id, attempt, r.Timestamp.UnixMilli(), nowUs())
	if h.flushEach {
		h.log.Flush()
	}
	h.mu.Unlock()
	if h.completed.Add(1) == h.target {
		close(h.reached)
	}
	return nil
}

// ---- workers and session goroutines ---------------------------------------------------------

type session struct {
	ch      chan *kgo.Record
	pending atomic.Int64
}

type worker struct {
	in       chan *kgo.Record
	evict    chan string
	sessions map[string]*session
	h        *handler
	tr       *trackers
	idle     time.Duration
	chanSize int
}

func (w *worker) run() {
	for {
		select {
		case r, ok := <-w.in:
			if !ok {
				for _, s := range w.sessions {
					close(s.ch)
				}
				return
			}
			key := string(r.Key)
			s, ok := w.sessions[key]
			if !ok {
				s = &session{ch: make(chan *kgo.Record, w.chanSize)}
				w.sessions[key] = s
				go w.runSession(key, s)
			}
			s.pending.Add(1)
			s.ch <- r
		case key := <-w.evict:
			// Evict only if nothing was queued since the session asked.
			if s, ok := w.sessions[key]; ok && s.pending.Load() == 0 {
				delete(w.sessions, key)
				close(s.ch)
			}
		}
	}
}

func (w *worker) runSession(key string, s *session) {
	timer := time.NewTimer(w.idle)
	defer timer.Stop()
	for {
		select {
		case r, ok := <-s.ch:
			if !ok {
				return
			}
			for attempt := 1; ; attempt++ {
				if err := w.h.handle(r, attempt); err == nil {
					break
				}
				time.Sleep(backoff(attempt))
			}
			if w.h.reply != nil {
				w.h.reply(r)
			}
			w.tr.get(tp{r.Topic, r.Partition}).completed(r.Offset)
			w.tr.inflight.Done()
			s.pending.Add(-1)
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			timer.Reset(w.idle)
		case <-timer.C:
			// Idle: ask the worker to evict; keep serving until it closes the channel.
			go func() { w.evict <- key }()
			timer.Reset(w.idle)
		}
	}
}

// cpuUs is the CPU time this process used so far, user and system, every thread (getrusage).
func cpuUs() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano()/1000 + ru.Stime.Nano()/1000
}

// cpuSinceFirst is the process's CPU time from the first record handed to a handler to now, µs.
func (h *handler) cpuSinceFirst() int64 {
	return cpuUs() - h.firstCpuUs.Load()
}

func peakRssKib() int64 {
	f, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(f), "\n") {
		if strings.HasPrefix(l, "VmHWM:") {
			fs := strings.Fields(l)
			if len(fs) >= 2 {
				v, _ := strconv.ParseInt(fs[1], 10, 64)
				return v
			}
		}
	}
	return 0
}

func main() {
	bootstrap := flag.String("bootstrap", os.Getenv("ORDERLY_BOOTSTRAP"), "bootstrap broker")
	topic := flag.String("topic", "", "topic")
	group := flag.String("group", "", "consumer group")
	records := flag.Int64("records", 0, "stop once this many records completed")
	failMod := flag.Uint64("fail-mod", 10, "failure-injection modulus (0 = none)")
	workUs := flag.Int("work-us", 0, "handler work per attempt, µs (a sleep)")
	workers := flag.Int("workers", 8, "workers")
	idle := flag.Duration("idle", 30*time.Second, "session idle eviction")
	logPath := flag.String("log", "", "handler log")
	logFlush := flag.Bool("log-flush", false, "write every log line with its own write (S6)")
	stallKey := flag.String("stall-session", "", "S4: this session fails on every attempt in the window")
	stallAfter := flag.Int64("stall-after-ms", 0, "S4: the window starts this long after the first record handled")
	stallFor := flag.Int64("stall-for-ms", 0, "S4: window length")
	sessionTimeout := flag.Duration("session-timeout", 45*time.Second, "group session timeout (franz-go's default: 45 s)")
	fetchMaxWait := flag.Duration("fetch-max-wait", 5*time.Second, "fetch max wait (franz-go's default: 5 s)")
	sessionChan := flag.Int("session-chan", 256, "records queued per session goroutine")
	workerChan := flag.Int("worker-chan", 1024, "records queued per worker")
	fetchMaxPartitionBytes := flag.Int("fetch-max-partition-bytes", 1<<20, "bytes fetched per partition per request (franz-go's default: 1 MiB)")
	// The design has no dead-letter step; accepted so that every system takes the same arguments.
	flag.String("dlq-topic", "", "unused: this design has no dead-letter step")
	httpURL := flag.String("http", "", "POST each record to this URL instead of the in-process handler")
	httpMaxIdle := flag.Int("http-max-idle", 1024, "-http: idle keep-alive connections kept per host")
	commitInterval := flag.Duration("commit-interval", time.Second, "how often offsets are committed (with -reply-topic: how often a transaction ends)")
	replyTopic := flag.String("reply-topic", "", "answer each record with one reply to this topic, in GroupTransactSession transactions (needs -transactional-id)")
	txnID := flag.String("transactional-id", "", "-reply-topic: the producer's transactional id")
	flag.Parse()
	if (*replyTopic == "") != (*txnID == "") {
		fmt.Fprintln(os.Stderr, "-reply-topic and -transactional-id go together")
		os.Exit(2)
	}

	f, err := os.Create(*logPath)
	if err != nil {
		fmt.Fprintln(os.Stderr, "log:", err)
		os.Exit(1)
	}
	h := &handler{failMod: *failMod, work: time.Duration(*workUs) * time.Microsecond,
		log: bufio.NewWriterSize(f, 1<<20), flushEach: *logFlush,
		stallKey: *stallKey, stallFrom: *stallAfter, stallUntil: *stallAfter + *stallFor,
		target: *records, reached: make(chan struct{}), httpURL: *httpURL}
	if *httpURL != "" {
		h.httpClient = &http.Client{
			Timeout: 30 * time.Second,
			Transport: &http.Transport{
				MaxIdleConns:        *httpMaxIdle,
				MaxIdleConnsPerHost: *httpMaxIdle,
				IdleConnTimeout:     90 * time.Second,
			},
		}
	}
	if *records <= 0 {
		close(h.reached)
	}
	tr := &trackers{m: map[tp]*partitionTracker{}}
	var ready sync.Once
	opts := []kgo.Opt{
		kgo.SeedBrokers(*bootstrap),
		kgo.ConsumerGroup(*group),
		kgo.ConsumeTopics(*topic),
		kgo.DisableAutoCommit(),
		kgo.SessionTimeout(*sessionTimeout),
		kgo.FetchMaxWait(*fetchMaxWait),
		kgo.FetchMaxPartitionBytes(int32(*fetchMaxPartitionBytes)),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, m map[string][]int32) {
			if len(m) > 0 {
				ready.Do(func() { fmt.Println("READY"); os.Stdout.Sync() })
			}
		}),
	}
	var cl *kgo.Client
	var sess *kgo.GroupTransactSession
	if *replyTopic != "" {
		opts = append(opts, kgo.TransactionalID(*txnID), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
		sess, err = kgo.NewGroupTransactSession(opts...)
		if err == nil {
			cl = sess.Client()
		}
	} else {
		cl, err = kgo.NewClient(opts...)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "client:", err)
		os.Exit(1)
	}
	// -reply-topic: the open transaction's replies report to one promise (franz-go's idiom): the
	// first failure aborts the records still buffered, and Err waits for every reply's outcome.
	var promise atomic.Pointer[kgo.FirstErrPromise]
	if sess != nil {
		topic := *replyTopic
		h.reply = func(r *kgo.Record) {
			sess.Produce(context.Background(), &kgo.Record{Topic: topic, Key: r.Key, Value: header(r, "event-id")},
				promise.Load().Promise())
		}
	}
	var txnStart time.Time
	// endTxn waits until every dispatched record completed and produced its reply and every reply
	// was acknowledged, then ends the transaction: a commit of the replies and the polled offsets
	// when all replies were written, else an abort.
	endTxn := func() error {
		tr.inflight.Wait()
		produceErr := promise.Load().Err()
		committed, err := sess.End(context.Background(), kgo.TransactionEndTry(produceErr == nil))
		if produceErr != nil {
			return fmt.Errorf("reply produce failed, transaction aborted: %v", produceErr)
		}
		if err != nil {
			return fmt.Errorf("end transaction: %v", err)
		}
		if !committed {
			return fmt.Errorf("transaction aborted (rebalance): its records would be handled again, which this peer does not do")
		}
		return nil
	}
	begin := func() {
		promise.Store(kgo.AbortingFirstErrPromise(cl))
		if err := sess.Begin(); err != nil {
			fmt.Fprintln(os.Stderr, "begin transaction:", err)
			os.Exit(1)
		}
		txnStart = time.Now()
	}
	if sess != nil {
		begin()
	}
	rg := newRing(*workers, 100)
	ws := make([]*worker, *workers)
	for i := range ws {
		ws[i] = &worker{in: make(chan *kgo.Record, *workerChan), evict: make(chan string, 64),
			sessions: map[string]*session{}, h: h, tr: tr, idle: *idle, chanSize: *sessionChan}
		go ws[i].run()
	}

	ctx, cancel := context.WithCancel(context.Background())
	// Periodic watermark commits.
	commitDone := make(chan struct{})
	go func() {
		defer close(commitDone)
		if *replyTopic != "" {
			return // the transactions commit the offsets
		}
		t := time.NewTicker(*commitInterval)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				if o := tr.offsets(); len(o) > 0 {
					cl.CommitOffsetsSync(ctx, o, nil)
				}
			}
		}
	}()
	// Stop once the target is reached.
	go func() {
		<-h.reached
		cancel()
	}()
	for ctx.Err() == nil {
		fs := cl.PollFetches(ctx)
		// A transaction commits the polled offsets, so records it polled are handled even after
		// the target was reached.
		if ctx.Err() != nil && sess == nil {
			break
		}
		fs.EachError(func(t string, p int32, err error) {
			fmt.Fprintf(os.Stderr, "fetch %s-%d: %v\n", t, p, err)
		})
		fs.EachRecord(func(r *kgo.Record) {
			tr.get(tp{r.Topic, r.Partition}).dispatched(r.Offset, r.LeaderEpoch)
			tr.inflight.Add(1)
			ws[rg.lookup(r.Key)].in <- r
		})
		if sess != nil && time.Since(txnStart) >= *commitInterval {
			if err := endTxn(); err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			begin()
		}
	}
	if sess != nil {
		// The final transaction: every record handled, its reply and its offset committed.
		if err := endTxn(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		end := nowUs()
		sess.Close()
		for _, w := range ws {
			close(w.in)
		}
		h.mu.Lock()
		fmt.Fprintf(h.log, "# system=go-seed-transact first_us=%d end_us=%d rss_kib=%d cpu_us=%d\n", h.firstUs.Load(), end, peakRssKib(), h.cpuSinceFirst())
		h.log.Flush()
		h.mu.Unlock()
		f.Close()
		return
	}
	<-commitDone
	// Final commit of the contiguous watermarks, then leave.
	var commitErr error
	cl.CommitOffsetsSync(context.Background(), tr.offsets(),
		func(_ *kgo.Client, _ *kmsg.OffsetCommitRequest, _ *kmsg.OffsetCommitResponse, err error) {
			commitErr = err
		})
	// The run ends when its last watermark was committed (benchmarks.md), before the
	// LeaveGroup of Close, as orderly's bench ends at its final commit's acknowledgement.
	end := nowUs()
	if commitErr != nil {
		fmt.Fprintln(os.Stderr, "final commit:", commitErr)
	}
	cl.Close()
	for _, w := range ws {
		close(w.in)
	}

	h.mu.Lock()
	fmt.Fprintf(h.log, "# system=go-seed first_us=%d end_us=%d rss_kib=%d cpu_us=%d\n", h.firstUs.Load(), end, peakRssKib(), h.cpuSinceFirst())
	h.log.Flush()
	h.mu.Unlock()
	f.Close()
}
