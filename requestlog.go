// requestlog.go writes the one log line of each request, by hand, byte for
// byte as the slog handler of logs.go would, into the log's buffer; and
// keeps the budget of lines that anyone can make it write without a key.

package main

import (
	"log/slog"
	"slices"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"
)

// requestLog writes the one log line of each request. The line is the one
// that newLogger's handler would write for the same attributes, byte for
// byte (TestRequestLogMatchesSlog), but it is appended straight into the
// log buffer, without slog's handler and its allocations on every request
// (BENCHMARKS.md has the figures).
type requestLog struct {
	json  bool
	level slog.Level // the least level written
	out   *logWriter
	now   func() time.Time // the time of a line, and of the budget's seconds

	// Under out.mu: the time of the last line, formatted to the second
	// and its zone, as formatting a time is a microsecond a line.
	stamp stampCache
	// Under out.mu: the budget of second sec (logBudgetPerSecond): lines
	// written, and lines left out, by what they were ("status_404").
	sec       int64
	logged    int
	left      map[string]int64
	leftN     int64
	leftLevel slog.Level // the highest level of a line left out
}

// logBudgetPerSecond is how many lines a second are written of what
// anyone can send without a valid key: every answer not given by an
// operation's handler to a valid key (401, 404, 405, 429, preflights,
// /v1/openapi.json, /healthz, /readyz, /docs), and whatever else calls
// allow. The seconds are the clock's (fixed windows: no burst carries
// over). The rest are counted, and one line says how many, by status,
// after the second ends: a flood would otherwise write gigabytes an hour.
// A valid key's lines of its operations' answers are never held back,
// and never spend the budget. The metrics count every request.
const logBudgetPerSecond = 100

func newRequestLog(format string, level slog.Level, out *logWriter) *requestLog {
	return &requestLog{json: format == "json", level: level, out: out, now: time.Now}
}

// requestLine is what the log says of one request. It never holds a
// header or the query, so never a key.
type requestLine struct {
	method, route string
	status        int
	duration      time.Duration
	bytes, key    int64
	requestID     string
	trace         *span // its trace_id and span_id; nil: none
	remote        string
	err           error
	errText       string // err.Error(), taken by write
	budgeted      bool   // not an operation's answer to a valid key: logBudgetPerSecond
}

// write logs e at t: at level ERROR for a 5xx, else INFO.
func (l *requestLog) write(t time.Time, e *requestLine) {
	level := slog.LevelInfo
	if e.status >= 500 {
		level = slog.LevelError
	}
	if level < l.level {
		return
	}
	if e.err != nil {
		// Outside the lock: an Error method that panics must not leave
		// every later log line waiting for it.
		e.errText = e.err.Error()
	}
	l.out.mu.Lock()
	l.turn(t)
	if e.budgeted && !l.spend() {
		l.leave(statusKey(e.status), level)
		l.out.mu.Unlock()
		return
	}
	if l.json {
		l.out.buf = e.appendJSON(l.out.buf, &l.stamp, t, level)
	} else {
		l.out.buf = e.appendText(l.out.buf, &l.stamp, t, level)
	}
	behind := l.out.filled()
	l.out.mu.Unlock()
	if behind {
		l.out.Flush()
	}
}

// allow reports whether a line about what (an attribute name of the count
// line, such as "status_400" or "tls_handshake") at level may be written
// now, under the budget of logBudgetPerSecond, and counts it as left out
// when not. It is for lines that write does not write: those of another
// listener, or of a connection that never became a request.
func (l *requestLog) allow(what string, level slog.Level) bool {
	if level < l.level {
		return false
	}
	t := l.now()
	l.out.mu.Lock()
	defer l.out.mu.Unlock()
	l.turn(t)
	if l.spend() {
		return true
	}
	l.leave(what, level)
	return false
}

// turn starts the budget of t's second when it is a later one than the
// budget's, first writing at t how many lines the last one left out. A
// line's time may come a little before the last one's (it was taken
// before the lock): such a line counts in the newer second. l.out.mu must
// be held.
func (l *requestLog) turn(t time.Time) {
	if sec := t.Unix(); sec > l.sec {
		l.closeSecond(t)
		l.sec = sec
	}
}

// spend reports whether the second has a line of its budget left, and
// takes it. l.out.mu must be held.
func (l *requestLog) spend() bool {
	if l.logged >= logBudgetPerSecond {
		return false
	}
	l.logged++
	return true
}

// statusKeys are the count line's attribute names of the HTTP statuses,
// made once: a flood leaves out thousands of lines a second, and each
// would otherwise build its name again.
var statusKeys = func() (keys [600]string) {
	for i := range keys {
		keys[i] = "status_" + strconv.Itoa(i)
	}
	return keys
}()

// statusKey is the count line's attribute name of status.
func statusKey(status int) string {
	if status >= 0 && status < len(statusKeys) {
		return statusKeys[status]
	}
	return "status_" + strconv.Itoa(status)
}

// leave counts a line about what at level as left out. l.out.mu must be
// held.
func (l *requestLog) leave(what string, level slog.Level) {
	if l.left == nil {
		l.left = map[string]int64{}
	}
	if l.leftN == 0 || level > l.leftLevel {
		l.leftLevel = level
	}
	l.left[what]++
	l.leftN++
}

// closeSecond writes, at t, how many lines of second sec were left out of
// the log, if any, in all and by what they were, and starts counting anew.
// The count line is at the highest level of the lines it counts, so that
// --log-level hides it only with them. l.out.mu must be held.
func (l *requestLog) closeSecond(t time.Time) {
	if l.leftN > 0 {
		names := make([]string, 0, len(l.left))
		for name := range l.left {
			names = append(names, name)
		}
		slices.Sort(names)
		b := appendHead(l.out.buf, l.json, &l.stamp, t, l.leftLevel, "requests not logged")
		if l.json {
			b = strconv.AppendInt(append(b, `,"count":`...), l.leftN, 10)
			for _, name := range names {
				b = append(appendJSONString(append(b, ','), name), ':')
				b = strconv.AppendInt(b, l.left[name], 10)
			}
			b = append(b, "}\n"...)
		} else {
			b = strconv.AppendInt(append(b, " count="...), l.leftN, 10)
			for _, name := range names {
				b = append(appendTextString(append(b, ' '), name), '=')
				b = strconv.AppendInt(b, l.left[name], 10)
			}
			b = append(b, '\n')
		}
		l.out.buf = b
		clear(l.left)
	}
	l.logged, l.leftN = 0, 0
}

// endSecond writes the count of lines left out of the log once their
// second is over (or at once, when final): the flusher asks, so that the
// count comes within 100 ms of the second's end even when no request
// follows.
func (l *requestLog) endSecond(now time.Time, final bool) {
	l.out.mu.Lock()
	defer l.out.mu.Unlock()
	if l.leftN > 0 && (final || now.Unix() > l.sec) {
		l.closeSecond(now)
		// A line of the closed second that comes late counts in this one,
		// as in write: no second logs more than logBudgetPerSecond.
		l.sec = max(l.sec, now.Unix())
	}
}

// appendHead appends what starts every line, its time, level and msg, as
// slog's handler of the format (JSON or text) writes them; the line's
// attributes follow.
func appendHead(b []byte, json bool, c *stampCache, t time.Time, level slog.Level, msg string) []byte {
	if json {
		b = append(b, `{"time":"`...)
		b = c.append(b, t, 0)
		b = append(append(b, `","level":"`...), level.String()...)
		return appendJSONString(append(b, `","msg":`...), msg)
	}
	b = append(b, "time="...)
	b = c.append(b, t, 3)
	b = append(append(b, " level="...), level.String()...)
	return appendTextString(append(b, " msg="...), msg)
}

// appendText appends the line as slog's TextHandler writes it.
func (e *requestLine) appendText(b []byte, c *stampCache, t time.Time, level slog.Level) []byte {
	b = appendHead(b, false, c, t, level, "request")
	b = append(b, " method="...)
	b = appendTextString(b, e.method)
	b = append(b, " route="...)
	b = appendTextString(b, e.route)
	b = append(b, " status="...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, " duration="...)
	b = append(b, e.duration.String()...)
	b = append(b, " bytes="...)
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, " key="...)
	b = strconv.AppendInt(b, e.key, 10)
	b = append(b, " request_id="...)
	b = appendTextString(b, e.requestID)
	if e.trace != nil {
		b = appendTraceIDs(b, false, e.trace)
	}
	b = append(b, " remote="...)
	b = appendTextString(b, e.remote)
	if e.err != nil {
		b = append(b, " err="...)
		b = appendTextString(b, e.errText)
	}
	return append(b, '\n')
}

// stampCache formats times as slog does, the text handler to the
// millisecond ("2006-01-02T15:04:05.000Z07:00"), the JSON handler as
// time.RFC3339Nano, keeping the part up to the second and the zone of the
// last second it saw: a zone's offset changes only on a whole second.
type stampCache struct {
	sec        int64
	loc        *time.Location
	date, zone []byte
}

// append appends t with a fraction of millis digits: 3 (the text
// handler's), or 0 for RFC3339Nano's (nanoseconds without trailing zeros,
// and no point when they are all zero).
func (c *stampCache) append(b []byte, t time.Time, millis int) []byte {
	if sec, loc := t.Unix(), t.Location(); sec != c.sec || loc != c.loc || c.date == nil {
		c.sec, c.loc = sec, loc
		c.date = t.AppendFormat(c.date[:0], "2006-01-02T15:04:05")
		c.zone = t.AppendFormat(c.zone[:0], "Z07:00")
	}
	b = append(b, c.date...)
	ns := t.Nanosecond()
	var frac [10]byte
	frac[0] = '.'
	for i, v := 9, ns; i > 0; i, v = i-1, v/10 {
		frac[i] = byte('0' + v%10)
	}
	if millis > 0 {
		b = append(b, frac[:1+millis]...)
	} else if ns != 0 {
		n := 10
		for frac[n-1] == '0' {
			n--
		}
		b = append(b, frac[:n]...)
	}
	return append(b, c.zone...)
}

// appendTextString appends s bare, or quoted when slog's TextHandler would
// quote it: empty, or holding a space, "=", a quote, a control character
// below 0x20, a non-printing or space rune beyond ASCII, or invalid UTF-8.
func appendTextString(b []byte, s string) []byte {
	if !textNeedsQuoting(s) {
		return append(b, s...)
	}
	return strconv.AppendQuote(b, s)
}

func textNeedsQuoting(s string) bool {
	if s == "" {
		return true
	}
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c == ' ' || c == '=' || c == '"' || c < 0x20 { // slog leaves DEL (0x7f) bare
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError || unicode.IsSpace(r) || !unicode.IsPrint(r) {
			return true
		}
		i += size
	}
	return false
}

// appendJSON appends the line as slog's JSONHandler writes it.
func (e *requestLine) appendJSON(b []byte, c *stampCache, t time.Time, level slog.Level) []byte {
	b = appendHead(b, true, c, t, level, "request")
	b = append(b, `,"method":`...)
	b = appendJSONString(b, e.method)
	b = append(b, `,"route":`...)
	b = appendJSONString(b, e.route)
	b = append(b, `,"status":`...)
	b = strconv.AppendInt(b, int64(e.status), 10)
	b = append(b, `,"duration":`...)
	b = strconv.AppendInt(b, int64(e.duration), 10)
	b = append(b, `,"bytes":`...)
	b = strconv.AppendInt(b, e.bytes, 10)
	b = append(b, `,"key":`...)
	b = strconv.AppendInt(b, e.key, 10)
	b = append(b, `,"request_id":`...)
	b = appendJSONString(b, e.requestID)
	if e.trace != nil {
		b = appendTraceIDs(b, true, e.trace)
	}
	b = append(b, `,"remote":`...)
	b = appendJSONString(b, e.remote)
	if e.err != nil {
		b = append(b, `,"err":`...)
		b = appendJSONString(b, e.errText)
	}
	return append(b, "}\n"...)
}

// appendJSONString appends s as a JSON string, escaped as slog does:
// quotes, backslashes and control characters, U+2028 and U+2029, and
// invalid UTF-8 as U+FFFD; "<", ">" and "&" stay as they are.
func appendJSONString(b []byte, s string) []byte {
	const hex = "0123456789abcdef"
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '"', '\\':
				b = append(b, '\\', c)
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hex[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
