// metrics_exposition.go owns what petstore adds to the library's
// Prometheus exposition: the help text of every family, the types and
// names Prometheus's linter wants, and the _count of the Go runtime's
// histograms, applied to each scrape by mendExposition.

package main

import (
	"bytes"
	"strings"
)

// family is what the exposition says of one metric family beyond what the
// library writes: the library's "# HELP" line has no text, which
// Prometheus's linter reports, and a few of its own families have a type or
// a name that the linter reports too.
type family struct {
	help   string
	typ    string // the TYPE instead of the library's, when set
	rename string // the name instead of the library's, when set
	// countOnly marks a histogram of the Go runtime's, which the library
	// writes without _count and _sum: mendExposition adds the _count (its
	// +Inf bucket); runtime/metrics keeps no sum.
	countOnly bool
}

// families are the help texts of every family served, ours and those of
// the library at the version go.mod pins (on Linux), under the name the
// library writes. A family that a later version of the library adds gets
// genericHelp; one of ours that is missing here goes out with no text,
// which the tests catch.
var families = map[string]family{
	// Ours.
	"petstore_http_requests_total":                      {help: "HTTP requests answered, by route and status: the route pattern (HEAD for a HEAD; for a 429, the route the request would have matched), unmatched when none matched (404, 405), plain for the plain listener's answers."},
	"petstore_http_request_duration_seconds":            {help: "Time from a request's arrival to the end of its answer, by route, as petstore_http_requests_total names it."},
	"petstore_ratelimit_refusals_total":                 {help: "Requests refused with 429, by reason: rate_limited, quota_exceeded, key_banned."},
	"petstore_bans_total":                               {help: "Keys banned for going on after their 429s."},
	"petstore_db_errors_total":                          {help: "Requests that failed on a database error (busy, locked, full disk, I/O)."},
	"petstore_group_commit_batches_total":               {help: "Transactions of the group commit, one fsync each."},
	"petstore_group_commit_writes_total":                {help: "Creates held by the group commit's transactions."},
	"petstore_category_list_reads_total":                {help: "Whole category lists read from the database."},
	"petstore_limiter_tracked_keys":                     {help: "API keys the rate limiter holds state for."},
	"petstore_limiter_tracked_addrs":                    {help: "Client addresses the rate limiter holds state for (at most --max-addrs)."},
	"petstore_build_info":                               {help: "The version of petstore and of Go it was built with; always 1."},
	"petstore_ratelimit_backend_up":                     {help: "Whether Redis answers the rate limiter: 1 while it does, 0 while this instance limits on its own."},
	"petstore_redis_calls_total":                        {help: "Rate-limit script calls to Redis, answered or not."},
	"petstore_redis_failures_total":                     {help: "Rate-limit script calls to Redis that failed, or that Redis did not answer within a second (or --redis-timeout when longer)."},
	"petstore_ratelimit_lease_local_total":              {help: "Requests of a key decided in memory from this instance's lease of its shared limits (--redis)."},
	"petstore_ratelimit_lease_waits_total":              {help: "Requests of a key that waited for Redis because this instance's lease could not cover them (--redis)."},
	"petstore_ratelimit_lease_wait_timeouts_total":      {help: "Requests of a key whose wait for Redis ran out (--redis-timeout) and that were decided from the shared state as last seen (--redis)."},
	"petstore_ratelimit_lease_granted_tokens_total":     {help: "Tokens of keys' shared limits that Redis leased to this instance ahead of its requests (--redis)."},
	"petstore_ratelimit_lease_returned_tokens_total":    {help: "Tokens of leases that this instance gave back unspent (--redis)."},
	"petstore_log_bytes_dropped_total":                  {help: "Log bytes dropped because writing to stderr kept failing."},
	"petstore_traces_dropped_total":                     {help: "Spans never sent to the OTLP collector: the export queue was full, or their batch failed for good."},
	"petstore_tls_certificate_expiry_timestamp_seconds": {help: "When each served certificate expires (its NotAfter), in seconds since the Unix epoch, by name."},
	"petstore_tls_handshake_errors_total":               {help: "TLS handshakes on the API listener that failed (plain HTTP, a bad or truncated ClientHello, a client refusing the certificate)."},
	"petstore_acme_failures_total":                      {help: "Attempts to obtain or renew a certificate from the ACME CA that failed."},
	"petstore_http2_errors_total":                       {help: "HTTP/2 protocol errors of clients that Go's server refused, by the type it reports."},
	"petstore_connections_open":                         {help: "Connections open, by listener: api and plain (what --max-conns counts together), admin (what --admin-max-conns counts)."},
	"petstore_connections_max":                          {help: "The cap on connections open on the API and plain listeners together (--max-conns, or its default)."},
	"petstore_admin_connections_max":                    {help: "The cap on connections open on the admin listener (--admin-max-conns)."},
	"petstore_requests_in_flight":                       {help: "Requests in flight on the API listener, counted until their stream or connection lets them go (at most --max-conns)."},
	"petstore_requests_in_flight_refused_total":         {help: "Requests refused at once for what is in flight: per_addr (over one client address's share of 64), total (over --max-conns)."},
	"petstore_connections_refused_total":                {help: "Connections closed at accept, before any TLS, by listener and by the cap reached: max_conns_per_addr, max_conns (api, plain), admin_max_conns (admin)."},
	"petstore_connections_closed_total":                 {help: "Connections petstore closed without a request: http2_no_stream (no first stream within --read-header-timeout)."},
	"petstore_db_reads_total":                           {help: "Requests whose reads went to --db-replica (source replica, reason fresh) or to the primary because the replica lagged more than --replica-max-lag (lag), had not replayed the Petstore-Read-After position within --replica-wait (wait), or failed or was unreachable (error); only with --db-replica."},
	"petstore_db_replica_waits_total":                   {help: "Reads that waited for --db-replica to replay their Petstore-Read-After position (or the key's last write here), whether it did within --replica-wait or not; only with --db-replica."},
	"petstore_db_replica_wait_seconds_total":            {help: "Time reads spent waiting for --db-replica to replay their position, in all; only with --db-replica."},
	"petstore_db_replica_lag_seconds":                   {help: "How long --db-replica has been short of the primary's last known position, as last checked (every 100 ms); 0 when caught up; only with --db-replica."},
	"petstore_db_synchronous_standbys":                  {help: "PostgreSQL standbys that confirm each commit (synchronous), as read at start, at every reconnection and each minute; 0: a failover may lose acknowledged writes; -1: unknown (grant pg_monitor)."},
	"petstore_db_lost_writes_total":                     {help: "Acknowledged creates of this instance found missing, or replaced by another row, after a reconnection to the primary or in the minute's check, by table (once per table and id): the database went back in time."},

	// The Go runtime's, from runtime/metrics and runtime.MemStats.
	// Histograms from runtime/metrics, which keeps no sum: their _count is
	// added, and they have no _sum (go_gc_duration_seconds has the pauses'
	// sum).
	"go_sched_latencies_seconds":          {help: "Time goroutines spent runnable before they ran; no _sum.", countOnly: true},
	"go_mutex_wait_seconds_total":         {help: "Time goroutines spent blocked on a sync.Mutex or sync.RWMutex (approximate)."},
	"go_gc_mark_assist_cpu_seconds_total": {help: "CPU time goroutines spent helping the garbage collector mark."},
	"go_gc_cpu_seconds_total":             {help: "CPU time spent by the garbage collector."},
	"go_gc_pauses_seconds":                {help: "Stop-the-world pauses of the garbage collector; no _sum.", countOnly: true},
	"go_scavenge_cpu_seconds_total":       {help: "CPU time spent returning unused memory to the OS."},
	"go_memlimit_bytes":                   {help: "The Go runtime's soft memory limit (GOMEMLIMIT)."},
	"go_memstats_alloc_bytes":             {help: "Bytes of allocated heap objects."},
	"go_memstats_alloc_bytes_total":       {help: "Bytes allocated for heap objects, freed or not."},
	"go_memstats_buck_hash_sys_bytes":     {help: "Bytes of memory in profiling bucket hash tables."},
	"go_memstats_frees_total":             {help: "Heap objects freed."},
	"go_memstats_gc_cpu_fraction":         {help: "Fraction of the CPU time available since the start that the garbage collector used."},
	"go_memstats_gc_sys_bytes":            {help: "Bytes of memory in garbage collection metadata."},
	"go_memstats_heap_alloc_bytes":        {help: "Bytes of allocated heap objects."},
	"go_memstats_heap_idle_bytes":         {help: "Bytes in idle (unused) heap spans."},
	"go_memstats_heap_inuse_bytes":        {help: "Bytes in in-use heap spans."},
	"go_memstats_heap_objects":            {help: "Allocated heap objects."},
	"go_memstats_heap_released_bytes":     {help: "Bytes of heap memory returned to the OS."},
	"go_memstats_heap_sys_bytes":          {help: "Bytes of heap memory obtained from the OS."},
	"go_memstats_last_gc_time_seconds":    {help: "When the last garbage collection ended, in seconds since the Unix epoch."},
	"go_memstats_lookups_total":           {help: "Pointer lookups performed by the runtime."},
	"go_memstats_mallocs_total":           {help: "Heap objects allocated."},
	"go_memstats_mcache_inuse_bytes":      {help: "Bytes of allocated mcache structures."},
	"go_memstats_mcache_sys_bytes":        {help: "Bytes of memory obtained from the OS for mcache structures."},
	"go_memstats_mspan_inuse_bytes":       {help: "Bytes of allocated mspan structures."},
	"go_memstats_mspan_sys_bytes":         {help: "Bytes of memory obtained from the OS for mspan structures."},
	"go_memstats_next_gc_bytes":           {help: "Heap size at which the next garbage collection starts."},
	"go_memstats_other_sys_bytes":         {help: "Bytes of memory in miscellaneous off-heap runtime allocations."},
	"go_memstats_stack_inuse_bytes":       {help: "Bytes in stack spans."},
	"go_memstats_stack_sys_bytes":         {help: "Bytes of stack memory obtained from the OS."},
	"go_memstats_sys_bytes":               {help: "Bytes of memory obtained from the OS in all."},
	"go_gc_duration_seconds":              {help: "Stop-the-world pauses of the garbage collector, as quantiles."},
	"go_gomaxprocs":                       {help: "GOMAXPROCS: how many threads may run Go code at once."},
	"go_goroutines":                       {help: "Goroutines that exist."},
	"go_threads":                          {help: "OS threads created by the Go runtime."},
	"go_info":                             {help: "The Go version the binary was built with; always 1."},
	"go_info_ext":                         {help: "The compiler, GOARCH, GOOS and GOROOT the binary was built with; always 1."},
	// The library names these with a "_count" suffix, which Prometheus
	// keeps for histograms and summaries: renamed.
	"go_cgo_calls_count": {help: "Calls from Go to C.", rename: "go_cgo_calls_total"},
	"go_gc_forced_count": {help: "Garbage collections the program forced (runtime.GC).", rename: "go_gc_forced_total"},
	"go_cpu_count":       {help: "Logical CPUs the process can use (runtime.NumCPU).", rename: "go_cpus"},

	// The process's, from /proc/self (Linux).
	"process_cpu_seconds_total":            {help: "CPU time of the process, user and system."},
	"process_cpu_seconds_user_total":       {help: "CPU time of the process in user mode."},
	"process_cpu_seconds_system_total":     {help: "CPU time of the process in the kernel."},
	"process_major_pagefaults_total":       {help: "Page faults that read from disk."},
	"process_minor_pagefaults_total":       {help: "Page faults served without reading from disk."},
	"process_num_threads":                  {help: "OS threads of the process."},
	"process_resident_memory_bytes":        {help: "Resident memory of the process."},
	"process_resident_memory_peak_bytes":   {help: "Peak resident memory of the process."},
	"process_resident_memory_anon_bytes":   {help: "Resident anonymous memory (heap, stacks)."},
	"process_resident_memory_file_bytes":   {help: "Resident file-backed memory (the binary, mapped files)."},
	"process_resident_memory_shared_bytes": {help: "Resident shared memory."},
	"process_virtual_memory_bytes":         {help: "Virtual memory of the process."},
	"process_virtual_memory_peak_bytes":    {help: "Peak virtual memory of the process."},
	"process_start_time_seconds":           {help: "When the process started, in seconds since the Unix epoch."},
	"process_max_fds":                      {help: "The limit of open file descriptors."},
	"process_open_fds":                     {help: "Open file descriptors (files, sockets)."},
	// The library types these as gauges; they only grow.
	"process_io_read_bytes_total":            {help: "Bytes read by read-like system calls, from the page cache or not.", typ: "counter"},
	"process_io_written_bytes_total":         {help: "Bytes written by write-like system calls.", typ: "counter"},
	"process_io_read_syscalls_total":         {help: "Read-like system calls.", typ: "counter"},
	"process_io_write_syscalls_total":        {help: "Write-like system calls.", typ: "counter"},
	"process_io_storage_read_bytes_total":    {help: "Bytes read from storage (not the page cache).", typ: "counter"},
	"process_io_storage_written_bytes_total": {help: "Bytes the process caused to be written to storage.", typ: "counter"},
	// Pressure stall information of the process's cgroup.
	"process_pressure_cpu_waiting_seconds_total":    {help: "Time some tasks of the process's cgroup waited for a CPU."},
	"process_pressure_cpu_stalled_seconds_total":    {help: "Time all non-idle tasks of the process's cgroup waited for a CPU."},
	"process_pressure_io_waiting_seconds_total":     {help: "Time some tasks of the process's cgroup waited for I/O."},
	"process_pressure_io_stalled_seconds_total":     {help: "Time all non-idle tasks of the process's cgroup waited for I/O."},
	"process_pressure_memory_waiting_seconds_total": {help: "Time some tasks of the process's cgroup waited for memory."},
	"process_pressure_memory_stalled_seconds_total": {help: "Time all non-idle tasks of the process's cgroup waited for memory."},
}

// genericHelp is the help text of a family of the library's that families
// does not know (one that a later version adds, or another OS's).
func genericHelp(name string) string {
	switch {
	case strings.HasPrefix(name, "go_"):
		return "A Go runtime metric of github.com/VictoriaMetrics/metrics."
	case strings.HasPrefix(name, "process_"):
		return "A process metric of github.com/VictoriaMetrics/metrics."
	}
	return ""
}

// mendExposition appends the exposition src to dst with each family's help
// text filled in, the types and names of families applied, and the _count
// of a countOnly histogram written after its +Inf bucket, with its value.
// The library writes one sample or comment a line, with no newline inside
// a label value, so the lines are taken one by one.
func mendExposition(dst, src []byte) []byte {
	for len(src) > 0 {
		line := src
		if i := bytes.IndexByte(src, '\n'); i >= 0 {
			line, src = src[:i], src[i+1:]
		} else {
			src = nil
		}
		if len(line) == 0 {
			continue
		}
		if line[0] == '#' {
			dst = mendComment(dst, line)
		} else {
			name := line[:metricNameLen(line)]
			if f, ok := families[string(name)]; ok && f.rename != "" {
				dst = append(dst, f.rename...)
				line = line[len(name):]
			}
			dst = append(dst, line...)
			if base, ok := bytes.CutSuffix(name, []byte("_bucket")); ok && families[string(base)].countOnly {
				if v, ok := bytes.CutPrefix(line[len(name):], []byte(`{le="+Inf"} `)); ok {
					dst = append(append(append(append(dst, '\n'), base...), "_count "...), v...)
				}
			}
		}
		dst = append(dst, '\n')
	}
	return dst
}

// mendComment appends the comment line to dst: a "# HELP name" with its
// text, a "# TYPE name type" with families' type, either under families'
// name; other comments as they are.
func mendComment(dst, line []byte) []byte {
	for _, kind := range []string{"# HELP ", "# TYPE "} {
		rest, ok := bytes.CutPrefix(line, []byte(kind))
		if !ok {
			continue
		}
		name, text, _ := bytes.Cut(rest, []byte(" "))
		f := families[string(name)]
		dst = append(dst, kind...)
		if f.rename != "" {
			dst = append(dst, f.rename...)
		} else {
			dst = append(dst, name...)
		}
		switch {
		case kind == "# TYPE " && f.typ != "":
			text = []byte(f.typ)
		case kind == "# HELP " && len(text) == 0:
			if text = []byte(f.help); f.help == "" {
				text = []byte(genericHelp(string(name)))
			}
		}
		if len(text) > 0 {
			dst = append(dst, ' ')
			dst = append(dst, text...)
		}
		return dst
	}
	return append(dst, line...)
}

// metricNameLen is the length of the metric name that begins the sample
// line: up to its labels or its value.
func metricNameLen(line []byte) int {
	if i := bytes.IndexAny(line, "{ "); i >= 0 {
		return i
	}
	return len(line)
}
